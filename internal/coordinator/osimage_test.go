package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/coordinatortest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// unmappedImagePolicy manages the DevMachine's spec.image but maps no image to an
// OS artifact.
const unmappedImagePolicy = `
infrastructureKinds:
- group: ` + coordinatortest.InfraMachineGroup + `
  kind: ` + coordinatortest.InfraMachineKind + `
  imagePaths: [spec.image]
`

// TestUpdateNodeRefusesAnUnmappedOSImageChange: the single-node controller asks the
// in-process entry for an infrastructure machine whose image changes (os-a stored,
// os-b desired) to one the policy does not map. The answer is a final failure with
// its typed cause, and the node is not touched (no cordon, no plan). Before, the
// unresolvable image meant "no OS change": the node got a plan without an OS and the
// Machine would have been aligned to an OS its node never ran.
func TestUpdateNodeRefusesAnUnmappedOSImageChange(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("oi", "v1.35.0", false)
	m := f.machine("m-oi", "oi", "v1.35.0", false)
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	stored.Annotations = nil // the single-node path sets no CAPI marks
	g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
	pol, err := policy.Parse([]byte(unmappedImagePolicy))
	g.Expect(err).NotTo(HaveOccurred())
	c := f.coordinator(func(o *Options) { o.OSImages = OSImagesFromPolicy(pol) })

	req := f.request(m, nil)
	bootstrap, err := toUnstructured(req.Desired.BootstrapConfig)
	g.Expect(err).NotTo(HaveOccurred())
	infra, err := toUnstructured(req.Desired.InfrastructureMachine)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(infra.Object["spec"]).To(HaveKeyWithValue("image", "os-a"), "the fixture's stored image")
	infra.Object["spec"].(map[string]any)["image"] = "os-b"
	desired := DesiredNode{Machine: &req.Desired.Machine, BootstrapConfig: bootstrap, InfrastructureMachine: infra}

	for range 2 { // and again: final, the same answer
		out := c.UpdateNode(f.ctx, desired)
		g.Expect(out.Kind).To(Equal(OutcomeFailedFinal), out.Message)
		g.Expect(out.Cause).To(Equal(CauseOSImageUnmapped))
		g.Expect(out.Message).To(ContainSubstring("from os-a to os-b"))
	}
	n := f.getNode("oi")
	g.Expect(n.Spec.Unschedulable).To(BeFalse(), "not cordoned")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation), "no plan published")

	// The same image as stored is not a change: the update goes ahead (cordon, plan)
	// even though the policy maps no artifact for it.
	infra.Object["spec"].(map[string]any)["image"] = "os-a"
	out := c.UpdateNode(f.ctx, desired)
	g.Expect(out.Kind).To(Equal(OutcomeInProgress), out.Message)
}
