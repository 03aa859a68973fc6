package policy

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRegistryCredentials(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{name: "valid", yaml: "registryCredentials: [{registry: Registry.Example.com:5000, secretRef: {namespace: capi-inplace-system, name: site-registry}}]"},
		{name: "a URL, not a host", yaml: "registryCredentials: [{registry: 'oci://registry.example.com', secretRef: {namespace: a, name: b}}]", wantErr: "must be a host[:port]"},
		{name: "a path", yaml: "registryCredentials: [{registry: registry.example.com/k8s, secretRef: {namespace: a, name: b}}]", wantErr: "must be a host[:port]"},
		{name: "no secret", yaml: "registryCredentials: [{registry: registry.example.com}]", wantErr: "secretRef must name a Secret"},
		{name: "twice", yaml: "registryCredentials: [{registry: r.example.com, secretRef: {namespace: a, name: b}}, {registry: R.example.com, secretRef: {namespace: a, name: c}}]", wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrInvalid))
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			ref, ok := p.RegistrySecret("registry.example.com:5000")
			g.Expect(ok).To(BeTrue(), "hosts compare case-insensitively")
			g.Expect(ref).To(Equal(SecretRef{Namespace: "capi-inplace-system", Name: "site-registry"}))
			_, ok = p.RegistrySecret("registry.example.com")
			g.Expect(ok).To(BeFalse(), "the port is part of the registry")
		})
	}
}
