package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// allPodsReady is the CEL gate of docs/gates.md: every pod bound to the node is Ready.
const allPodsReady = `pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))`

// bindPod creates a pod bound to node (spec.nodeName, as the scheduler binds it)
// with its Ready condition, in a namespace of its own so that no other test's
// node sees it; envtest runs no kubelet, so the status stays as written.
func bindPod(t *testing.T, node, name string, ready corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	ns := "gates-" + node
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: metav1.Now()}}}
	if _, err := client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func celGatePlan(name string, passWithin int32) *protocol.NodePlan {
	p := workerPlan(name)
	p.Gates = []protocol.Gate{{Name: "pods-ready", CEL: &protocol.CELGate{Expression: allPodsReady}, PassWithinSeconds: passWithin}}
	return p
}

// TestCELGateNotReadyPodRollsBack: a pod bound to the node that is not Ready
// fails the CEL gate; the agent names the gate in its status while it runs and
// after it failed, and rolls the node back (the plan's file is undone, the
// kubelet keeps its version). A pod of another node does not count.
func TestCELGateNotReadyPodRollsBack(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "w-cel-fail", "v1.35.2", false)
	bindPod(t, n.name, "web-0", corev1.ConditionTrue)
	bindPod(t, n.name, "web-1", corev1.ConditionFalse)
	bindPod(t, "another-node", "db-0", corev1.ConditionTrue)
	n.start("--gate-timeout", "60s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	oldConf := n.read("etc/app/app.conf")

	hash := n.publishPlan(celGatePlan(n.name, 6))
	g.Eventually(func() string { s := n.status(); return string(s.Phase) + "/" + s.Action + "/" + s.Gate }, 60*time.Second, 100*time.Millisecond).
		Should(Equal("Verifying/gates/pods-ready"), "status names the gate while it runs")
	st := n.waitPhase(g, hash, protocol.PhaseRolledBack, 60*time.Second)
	g.Expect(st.Reason).To(Equal(state.ReasonGateFailed))
	g.Expect(st.Gate).To(Equal("pods-ready"))
	g.Expect(st.Message).To(ContainSubstring("gate pods-ready did not pass within 6s"))
	g.Expect(st.Message).To(ContainSubstring("CEL expression is false over node w-cel-fail and its 2 pods"))

	g.Expect(n.get().Annotations).NotTo(HaveKey(inplacev1.CurrentPlanAnnotation))
	g.Expect(n.read("etc/app/app.conf")).To(Equal(oldConf), "the plan's file is rolled back")
	g.Eventually(func() string { return n.get().Status.NodeInfo.KubeletVersion }, 10*time.Second).Should(Equal("v1.35.2"))
	g.Expect(n.runs()).To(HaveKeyWithValue("gates", 1))
	g.Expect(n.runs()).NotTo(HaveKey("backend-commit"))
}

// TestCELGateReadyPodsCommit: with every pod on the node Ready the same gate
// passes and the plan commits.
func TestCELGateReadyPodsCommit(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "w-cel-pass", "v1.35.2", false)
	bindPod(t, n.name, "web-0", corev1.ConditionTrue)
	bindPod(t, n.name, "web-1", corev1.ConditionTrue)
	bindPod(t, "another-node-2", "db-0", corev1.ConditionFalse)
	n.start("--gate-timeout", "60s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))

	hash := n.publishPlan(celGatePlan(n.name, 30))
	n.waitPhase(g, hash, protocol.PhaseCommitted, 90*time.Second)
	g.Expect(n.read("etc/app/app.conf")).To(Equal("new\n"))
	g.Expect(n.get().Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
}

// TestEtcdQuorumHoldTimesOut: a control-plane plan held before touch because
// the etcd cluster is not whole is refused after --etcd-quorum-hold-timeout,
// Failed with reason EtcdQuorumTimeout, and nothing on the node changed.
func TestEtcdQuorumHoldTimesOut(t *testing.T) {
	g := NewWithT(t)
	n := newNode(t, "cp-quorum-timeout", "v1.35.2", true)
	n.start("--gate-timeout", "60s", "--etcd-quorum-hold-timeout", "8s")
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), []byte("etcd-quorum"), 0o644)).To(Succeed())

	hash := n.publishPlan(cpPlan(n.name))
	g.Eventually(func() string { return n.status().Reason }, 30*time.Second).Should(Equal(protocol.ReasonWaitingForEtcdQuorum))
	st := n.waitPhase(g, hash, protocol.PhaseFailed, 40*time.Second)
	g.Expect(st.Reason).To(Equal(protocol.ReasonEtcdQuorumTimeout))
	g.Expect(st.Message).To(ContainSubstring("the etcd cluster was not whole within 8s"))
	g.Expect(st.Message).To(ContainSubstring("nothing on the node changed"))
	g.Expect(n.runs()).To(BeEmpty(), "no action ran")
	g.Expect(n.read("etc/kubernetes/audit-policy.yaml")).To(Equal("<missing>"))
	g.Expect(n.read(".sim/boots")).To(Equal("1\n"))

	// Refused for good: the cluster healing does not start the refused plan.
	g.Expect(os.Remove(n.sim("fail-gate"))).To(Succeed())
	g.Consistently(func() string { return string(n.status().Phase) }, 7*time.Second, 500*time.Millisecond).Should(Equal(string(protocol.PhaseFailed)))
	g.Expect(n.runs()).To(BeEmpty())
}

// TestEtcdQuorumHoldOutlivesTheAgent: the hold before touch is dated on the
// node's disk, so an agent restarted mid-hold refuses the plan when the first
// hold times out, not a full timeout after its restart (a crash-looping agent
// would otherwise hold the cordoned node for ever); and a retry of the refused
// plan is held afresh, not refused again at once.
func TestEtcdQuorumHoldOutlivesTheAgent(t *testing.T) {
	const holdTimeout = 20 * time.Second
	g := NewWithT(t)
	n := newNode(t, "cp-quorum-restart", "v1.35.2", true)
	args := []string{"--gate-timeout", "60s", "--etcd-quorum-hold-timeout", holdTimeout.String()}
	n.start(args...)
	g.Eventually(func() string { return n.read(".sim/boot-id") }, 20*time.Second).ShouldNot(Equal("<missing>"))
	g.Expect(os.WriteFile(n.sim("fail-gate"), []byte("etcd-quorum"), 0o644)).To(Succeed())

	hash := n.publishPlan(cpPlan(n.name))
	g.Eventually(func() string { return n.status().Reason }, 30*time.Second).Should(Equal(protocol.ReasonWaitingForEtcdQuorum))
	held := time.Now()
	holdFile := filepath.Join(n.stateDir(), agent.HoldFileName)
	g.Expect(holdFile).To(BeAnExistingFile(), "the hold is dated on the node's disk")
	time.Sleep(time.Until(held.Add(holdTimeout / 2)))
	n.kill()
	n.start(args...)
	restarted := time.Now()

	// A count started afresh by the restart could not end before restarted+holdTimeout.
	st := n.waitPhase(g, hash, protocol.PhaseFailed, holdTimeout-time.Second)
	g.Expect(st.Reason).To(Equal(protocol.ReasonEtcdQuorumTimeout))
	t.Logf("held %s in all, refused %s after the restart", time.Since(held).Round(time.Second), time.Since(restarted).Round(time.Second))
	g.Expect(n.runs()).To(BeEmpty(), "no action ran")
	g.Expect(holdFile).NotTo(BeAnExistingFile(), "the refused plan's hold ended")

	// The coordinator's retry clears the verdict and publishes the same plan: it
	// is held again, then runs once the etcd cluster is whole.
	n.clearForRetry(g)
	g.Expect(n.publishPlan(cpPlan(n.name))).To(Equal(hash), "the retry republishes the same plan")
	g.Eventually(func() string { return n.status().Reason }, 30*time.Second).Should(Equal(protocol.ReasonWaitingForEtcdQuorum))
	g.Consistently(func() protocol.Phase { return n.status().Phase }, 6*time.Second, 500*time.Millisecond).
		ShouldNot(Equal(protocol.PhaseFailed), "a retry is held afresh")
	g.Expect(os.Remove(n.sim("fail-gate"))).To(Succeed())
	n.waitPhase(g, hash, protocol.PhaseCommitted, 90*time.Second)
}
