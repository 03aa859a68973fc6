package policy

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestOSImageValue: the key image field's canonical value, mapped or not; "" when
// the kind has no image or the object does not set it; unknown kinds are an error.
func TestOSImageValue(t *testing.T) {
	p, err := Parse([]byte(sampleYAML))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	obj := func(kind string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": kind, "spec": spec}}
	}
	tests := []struct {
		name    string
		obj     *unstructured.Unstructured
		want    string
		wantErr error
	}{
		{"unmapped string image", obj("AWSMachine", map[string]any{"ami": map[string]any{"id": "ami-unknown"}}), "ami-unknown", nil},
		{"template", obj("Metal3MachineTemplate", map[string]any{"template": map[string]any{"spec": map[string]any{"image": map[string]any{"url": "u"}}}}), "u", nil},
		{"not set", obj("DockerMachine", map[string]any{}), "", nil},
		{"unknown kind", obj("FooMachine", map[string]any{}), "", ErrUnknownKind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := p.OSImageValue(tt.obj)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
