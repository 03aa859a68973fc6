package agent_test

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestControlPlaneHeldUntilEtcdQuorum: while the etcd cluster is not whole (the
// simulated host fails the etcd-quorum check), a control-plane plan is held
// Pending with the reason before anything on the node changes: no action runs,
// no file is written, the kubelet keeps its version. Once the cluster is whole
// again the agent starts the plan by itself and commits it.
func TestControlPlaneHeldUntilEtcdQuorum(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-quorum", "v1.35.2", true)
	n.start("--gate-timeout", "60s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), []byte("etcd-quorum"), 0o644)).To(Succeed())

	hash := n.publishPlan(cpPlan(n.name))
	n.waitPhase(g, hash, protocol.PhasePending, 30*time.Second)
	g.Eventually(func() string { return n.status().Reason }, 20*time.Second).Should(Equal(protocol.ReasonWaitingForEtcdQuorum))
	st := n.status()
	g.Expect(st.Message).To(ContainSubstring("gate etcd-quorum fails"))
	// Held across several re-checks (every 5 s): nothing was touched.
	g.Consistently(func() string { return string(n.status().Phase) }, 7*time.Second, 500*time.Millisecond).Should(Equal(string(protocol.PhasePending)))
	g.Expect(n.runs()).To(BeEmpty(), "no action ran")
	g.Expect(n.read("etc/kubernetes/audit-policy.yaml")).To(Equal("<missing>"), "no plan file was written")
	g.Expect(n.read(".sim/boots")).To(Equal("1\n"), "no reboot")
	g.Expect(n.get().Annotations).NotTo(HaveKey(inplacev1.CurrentPlanAnnotation))

	g.Expect(os.Remove(n.sim("fail-gate"))).To(Succeed())
	n.waitPhase(g, hash, protocol.PhaseCommitted, 90*time.Second)
	g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
}
