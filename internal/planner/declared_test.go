package planner_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// TestDeclaredOSImage: an OS image declared in the KubeadmConfigTemplate's files
// (as a ClusterClass variable and patch set it) is covered when the policy maps it
// to an artifact with a digest, for a DevMachine whose own image field cannot
// change; an unmapped or removed declaration is refused.
func TestDeclaredOSImage(t *testing.T) {
	pol, err := policy.New(policy.Config{
		Backends: policy.BackendConfig{Default: "rauc"},
		Artifacts: []policy.ArtifactConfig{
			{Image: "edge-os-2026.12", Kind: policy.DeclaredImageKind, URL: "https://os.example.com/edge-os-2026.12.raucb", Digest: digest},
			{Image: "edge-os-2026.11", Ref: "/srv/edge-os-2026.11.raucb", Digest: digest},
		},
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	declare := func(o msObjects, image string) msObjects {
		spec := o.kct.Spec.Template.Spec.DeepCopy()
		if image != "" {
			spec.Files = append(spec.Files, bootstrapv1.File{Path: policy.OSImageFile, Content: image + "\n"})
		}
		o.kct = o.kct.DeepCopy()
		o.kct.Spec.Template.Spec = *spec
		return o
	}
	tests := []struct {
		name     string
		from, to string
		covered  bool
		inReason string
	}{
		{name: "declared for the first time", to: "edge-os-2026.12", covered: true, inReason: "/var/lib/capi-inplace/artifacts/sha256/0123"},
		{name: "changed", from: "edge-os-2026.11", to: "edge-os-2026.12", covered: true, inReason: `was "edge-os-2026.11"`},
		{name: "kind-less artifact entry", from: "edge-os-2026.12", to: "edge-os-2026.11", covered: true, inReason: "/srv/edge-os-2026.11.raucb"},
		{name: "not mapped", from: "edge-os-2026.11", to: "edge-os-2027.01", inReason: "is not mapped"},
		{name: "removed", from: "edge-os-2026.11", inReason: "is removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cur, des := declare(baseMS("a", "v1.35.2"), tt.from), declare(baseMS("b", "v1.35.2"), tt.to)
			p, err := planner.New(pol)
			g.Expect(err).NotTo(HaveOccurred())
			res, err := p.CanUpdateMachineSet(nil, cur.objects(), des.objects())
			g.Expect(err).NotTo(HaveOccurred())
			var found bool
			for _, d := range res.Decisions {
				if strings.Contains(d.Field, policy.OSImageFile) {
					found = true
					g.Expect(d.Covered).To(Equal(tt.covered), "%+v", d)
					g.Expect(d.Reason).To(ContainSubstring(tt.inReason))
				}
			}
			g.Expect(found).To(BeTrue(), "%+v", res.Decisions)
			g.Expect(res.FullyCovered()).To(Equal(tt.covered), "%+v", res.Decisions)
		})
	}
}
