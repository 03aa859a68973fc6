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
		{name: "bad namespace", yaml: "registryCredentials: [{registry: r.example.com, namespaces: [Tenant_A], secretRef: {namespace: a, name: b}}]", wantErr: "is not a namespace name"},
		{name: "twice for one namespace", yaml: "registryCredentials: [{registry: r.example.com, namespaces: [t], secretRef: {namespace: a, name: b}}, {registry: r.example.com, namespaces: [t], secretRef: {namespace: a, name: c}}]", wantErr: "listed twice for namespace t"},
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
			ref, ok := p.RegistrySecret("tenant-a", "registry.example.com:5000")
			g.Expect(ok).To(BeTrue(), "hosts compare case-insensitively")
			g.Expect(ref).To(Equal(SecretRef{Namespace: "capi-inplace-system", Name: "site-registry"}))
			_, ok = p.RegistrySecret("tenant-a", "registry.example.com")
			g.Expect(ok).To(BeFalse(), "the port is part of the registry")
		})
	}
}

// TestRegistryCredentialsPerNamespace: a login scoped to namespaces goes only to
// their Machines; the registry's entry without namespaces serves every other
// namespace, and a registry with only scoped entries gives other namespaces none.
func TestRegistryCredentialsPerNamespace(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(`registryCredentials:
- {registry: r.example.com, secretRef: {namespace: sys, name: default-login}}
- {registry: r.example.com, namespaces: [tenant-a, tenant-b], secretRef: {namespace: sys, name: ab-login}}
- {registry: only.example.com, namespaces: [tenant-a], secretRef: {namespace: sys, name: a-login}}
`))
	g.Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		namespace, host string
		want            string
	}{
		{"tenant-a", "r.example.com", "ab-login"},
		{"tenant-b", "R.example.com", "ab-login"},
		{"tenant-c", "r.example.com", "default-login"},
		{"tenant-a", "only.example.com", "a-login"},
		{"tenant-c", "only.example.com", ""},
	}
	for _, tt := range tests {
		ref, ok := p.RegistrySecret(tt.namespace, tt.host)
		g.Expect(ok).To(Equal(tt.want != ""), tt.namespace+" "+tt.host)
		g.Expect(ref.Name).To(Equal(tt.want), tt.namespace+" "+tt.host)
	}
}
