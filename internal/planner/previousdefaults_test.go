package planner

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/webhooks/admission"
)

// TestPreviousDefaultsAreCAPIs: capiPreviousDefaults are the fields and values
// Cluster API's own ApplyPreviousKubeadmConfigDefaults sets on an empty
// KubeadmConfigSpec, so a Cluster API release that changes them fails here.
func TestPreviousDefaultsAreCAPIs(t *testing.T) {
	g := NewWithT(t)
	var spec bootstrapv1.KubeadmConfigSpec
	admission.ApplyPreviousKubeadmConfigDefaults(&spec)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	g.Expect(err).NotTo(HaveOccurred())
	var set []string
	for _, d := range capiPreviousDefaults {
		v, ok := lookup(m, d.path)
		g.Expect(ok).To(BeTrue(), "Cluster API sets %v", d.path)
		g.Expect(v).To(Equal(d.value), "%v", d.path)
		set = append(set, fieldPath(d.path).String())
	}
	g.Expect(leafDiffs(map[string]any{}, m)).To(HaveLen(len(set)), "Cluster API sets no other field: %v", leafDiffs(map[string]any{}, m))
}
