package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestUnguardedReportIsNotDone: with the policy that keeps a node's report to its
// agent deleted, a Committed report (which anyone who may patch nodes/status could
// then have written) is not taken as done: the policy is applied again, the
// report withdrawn, and the report the agent writes next is taken.
func TestUnguardedReportIsNotDone(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("wg", "v1.36.0", false)
	f.node("wg-peer", "v1.36.0", false)
	m := f.machine("m-wg", "wg", "v1.36.0", false)
	req := f.request(m, nil)
	c := f.coordinator(func(o *Options) { o.ManageAgents = true; o.AgentImage = "registry.example/capi-inplace:test" })
	callUntil(t, c, req, "pick up plan", 5)
	hash := f.getNode("wg").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())

	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	g.Expect(f.wl.Get(f.ctx, client.ObjectKey{Name: agentinstall.PolicyName}, binding)).To(Succeed())
	g.Expect(f.wl.Delete(f.ctx, binding)).To(Succeed())
	f.agentReports("wg", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)

	resp := call(c, req)
	g.Expect(resp.RetryAfterSeconds).NotTo(BeZero(), "not done: %s", resp.Message)
	g.Expect(resp.Message).To(ContainSubstring("is missing"))
	n := f.getNode("wg")
	g.Expect(n.Spec.Unschedulable).To(BeTrue(), "still cordoned")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.StatusAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CurrentPlanAnnotation))
	g.Expect(f.wl.Get(f.ctx, client.ObjectKey{Name: agentinstall.PolicyName}, binding)).To(Succeed(), "the binding is back")

	// The agent reports again, under the policy: done.
	f.agentReports("wg", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)
	resp = call(c, req)
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
	g.Expect(resp.Message).To(Equal("node wg runs plan " + hash[:12]))
	g.Expect(f.getNode("wg").Spec.Unschedulable).To(BeFalse())
}
