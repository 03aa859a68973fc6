package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// publishedPlan opens the node's published plan as its agent does.
func (f *fixture) publishedPlan(node string) *protocol.NodePlan {
	f.t.Helper()
	p, err := openPlan(f.planSecret(node).Data[inplacev1.PlanSecretDataKey])
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// TestRetryRebuildsThePlanFromTheCurrentPolicy: the policy names a wrong digest for
// kubeadm and kubelet, so the node's staging fails (DigestMismatch, permanent).
// The operator corrects the policy and restarts the extension: the failure stays
// (a kept plan is not replaced behind the operator's back), and the retry builds
// the plan again from the corrected policy, so the node stages the right digest and
// the update goes on. Before, the retry re-published the stored plan with the old
// digest (nodeplan.KeepPublished: a digest of the binaries is not part of the
// desired state), which failed again at once.
func TestRetryRebuildsThePlanFromTheCurrentPolicy(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	self, err := os.Executable()
	g.Expect(err).NotTo(HaveOccurred())
	exe, err := os.ReadFile(self)
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(exe) }))
	defer srv.Close()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	policyWith := func(digest string) *policy.Policy {
		t.Helper()
		pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "%[2]s/kubeadm", digest: "%[3]s"}
      kubelet: {url: "%[2]s/kubelet", digest: "%[3]s"}
`, platform, srv.URL, digest))
		g.Expect(err).NotTo(HaveOccurred())
		return pol
	}
	wrong, right := sha([]byte("not the binary")), sha(exe)

	f.node("rp1", "v1.35.0", false)
	f.node("rp1-peer", "v1.35.0", false)
	n := f.getNode("rp1")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	store := &artifact.Store{Root: t.TempDir()}
	stager := &agent.Stager{Store: store, Client: cs, NodeName: "rp1", Log: logr.Discard(),
		Backends: func(string) (backend.Backend, error) { return none.New(), nil }}
	agentStages := func() {
		t.Helper()
		g.Expect(stager.Reconcile(context.Background(), f.getNode("rp1"), f.planSecret("rp1"), testAgentKey)).To(Succeed())
	}
	m := f.machine("m-rp1", "rp1", "v1.36.3", false)
	req := f.request(m, nil)

	before := f.coordinator(func(o *Options) { o.Binaries = policyWith(wrong) })
	g.Expect(call(before, req).Message).To(ContainSubstring("asked the agent on node rp1 to stage plan"))
	failedPlan := f.publishedPlan("rp1")
	g.Expect(failedPlan.Kubernetes.Binaries.Kubeadm.Digest).To(Equal(wrong))
	agentStages()
	resp := call(before, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("DigestMismatch"))
	failedHash, err := failedPlan.Hash()
	g.Expect(err).NotTo(HaveOccurred())

	// The extension restarted with the corrected policy: without a retry the
	// failure stays, and the stored plan is the one that failed.
	after := f.coordinator(func(o *Options) { o.Binaries = policyWith(right) })
	resp = call(after, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure), resp.Message)
	g.Expect(resp.Message).To(ContainSubstring("DigestMismatch"))
	g.Expect(f.publishedPlan("rp1").Kubernetes.Binaries.Kubeadm.Digest).To(Equal(wrong))

	f.annotate(m, inplacev1.RetryAnnotation, "true")
	resp = call(after, req)
	g.Expect(resp.Message).To(ContainSubstring("retrying node rp1: the failed plan " + failedHash[:12] + " was withdrawn"))
	retryMsg := resp.Message
	node := f.getNode("rp1")
	for _, k := range []string{inplacev1.StagingStatusAnnotation, inplacev1.StagePlanAnnotation, inplacev1.DesiredPlanAnnotation} {
		g.Expect(node.Annotations).NotTo(HaveKey(k), "the old plan's staging report is cleared")
	}

	g.Expect(call(after, req).Message).To(ContainSubstring("asked the agent on node rp1 to stage plan"))
	retried := f.publishedPlan("rp1")
	g.Expect(retried.Kubernetes.Binaries.Kubeadm.Digest).To(Equal(right), "the retry publishes the corrected policy's plan")
	g.Expect(retried.Kubernetes.Binaries.Kubelet.Digest).To(Equal(right))
	retriedHash, err := retried.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(retriedHash).NotTo(Equal(failedHash), "a new plan: the agent starts a new attempt")
	g.Expect(f.getNode("rp1").Annotations).To(HaveKeyWithValue(inplacev1.StagePlanAnnotation, retriedHash))
	g.Expect(retryMsg).To(ContainSubstring("the plan is built again from the current policy and spec"))

	agentStages()
	g.Expect(store.Has(right)).To(BeTrue())
	resp = call(after, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	node = f.getNode("rp1")
	g.Expect(node.Spec.Unschedulable).To(BeTrue(), "cordoned once staged: %s", resp.Message)
	g.Expect(node.Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, retriedHash))

	// The replica that still runs the old policy keeps the new plan: one plan per
	// desired state between retries.
	g.Expect(call(before, req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(f.getNode("rp1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, retriedHash))
	g.Expect(f.publishedPlan("rp1").Kubernetes.Binaries.Kubeadm.Digest).To(Equal(right))
}

// TestRetryAfterARollbackTakesThePolicyFix: a plan the agent rolled back (a wrong
// preflight setting, say) is built again on retry from the policy the extension
// now runs, even though the desired state is the same.
func TestRetryAfterARollbackTakesThePolicyFix(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("rr-w1", "v1.35.0", false)
	f.node("rr-peer", "v1.35.0", false)
	m := f.machine("m-rr-w1", "rr-w1", "v1.36.0", false)
	req := f.request(m, nil)
	failedHash := f.rollBack(f.coordinator(), req, "rr-w1")
	g.Expect(f.publishedPlan("rr-w1").Kubernetes.IgnorePreflightErrors).To(BeEmpty())

	pol, err := policy.Parse([]byte("kubeadm:\n  ignorePreflightErrors: [SystemVerification]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	fixed := f.coordinator(func(o *Options) { o.Preflight = pol })
	f.annotate(m, inplacev1.RetryAnnotation, "true")
	retryMsg := call(fixed, req).Message
	callUntil(t, fixed, req, "pick up plan", 3)
	hash := f.getNode("rr-w1").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(f.publishedPlan("rr-w1").Kubernetes.IgnorePreflightErrors).To(ConsistOf("SystemVerification"))
	g.Expect(hash).NotTo(Equal(failedHash))
	g.Expect(retryMsg).To(ContainSubstring("the plan is built again from the current policy and spec"))
}

// TestRetryKeepsThePlanOfAnAgentAtWork: past the rebooting deadline the agent's
// last report is of work in progress, so it may still be changing the node. A
// retry then asks for the same plan again, whatever the policy of the replica
// that serves it, so that no other plan is put under the agent.
func TestRetryKeepsThePlanOfAnAgentAtWork(t *testing.T) {
	g := NewWithT(t)
	d := newDeadlineFixture(t, "rk-w1")
	callUntil(t, d.c, d.req, "pick up plan", 3)
	hash := d.getNode("rk-w1").Annotations[inplacev1.DesiredPlanAnnotation]
	d.agentReports("rk-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRebooting, Step: 5, Steps: 9, Action: "reboot"}, false)
	d.at(time.Minute)
	call(d.c, d.req)
	d.at(40 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("passed its deadline"))

	pol, err := policy.Parse([]byte("kubeadm:\n  ignorePreflightErrors: [SystemVerification]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	other := d.coordinator(func(o *Options) {
		o.Preflight = pol
		o.Now = func() time.Time { return time.Unix(d.now.Load(), 0).UTC() }
	})
	d.annotate(d.m, inplacev1.RetryAnnotation, "true")
	retryMsg := call(other, d.req).Message
	g.Expect(d.planSecret("rk-w1").Data).NotTo(BeEmpty(), "the plan Secret stays")
	callUntil(t, other, d.req, "plan "+hash[:12], 3)
	g.Expect(d.getNode("rk-w1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
	g.Expect(d.publishedPlan("rk-w1").Kubernetes.IgnorePreflightErrors).To(BeEmpty())
	g.Expect(retryMsg).To(ContainSubstring("the same plan is asked for again"))
}

// TestRetryCutShortGoesOn: a retry that deleted the plan Secret and then died
// (before it cleared the node's verdict) is finished by the next call, which
// built the new plan: the old verdict, the failure record and the annotation go,
// and the new plan is published.
func TestRetryCutShortGoesOn(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("rc-w1", "v1.35.0", false)
	f.node("rc-peer", "v1.35.0", false)
	m := f.machine("m-rc-w1", "rc-w1", "v1.36.0", false)
	req := f.request(m, nil)
	failedHash := f.rollBack(f.coordinator(), req, "rc-w1")
	g.Expect(f.fleetState().Failures).To(HaveLen(1))

	// The retry's first step, and nothing after it.
	g.Expect(f.wl.Delete(f.ctx, f.planSecret("rc-w1"))).To(Succeed())
	f.annotate(m, inplacev1.RetryAnnotation, "true")

	pol, err := policy.Parse([]byte("kubeadm:\n  ignorePreflightErrors: [SystemVerification]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	fixed := f.coordinator(func(o *Options) { o.Preflight = pol })
	resp := call(fixed, req)
	g.Expect(resp.Message).To(ContainSubstring("retrying node rc-w1: the failed plan " + failedHash[:12] + " was withdrawn"))
	n := f.getNode("rc-w1")
	for _, k := range []string{inplacev1.DesiredPlanAnnotation, inplacev1.StatusAnnotation, inplacev1.StateAnnotation} {
		g.Expect(n.Annotations).NotTo(HaveKey(k))
	}
	g.Expect(f.fleetState().Failures).To(BeEmpty())
	g.Expect(f.rec.reasons()).NotTo(ContainElement(inplacev1.EventNothingToRetry))

	callUntil(t, fixed, req, "pick up plan", 3)
	g.Expect(f.getNode("rc-w1").Annotations[inplacev1.DesiredPlanAnnotation]).NotTo(Equal(failedHash))
	g.Expect(f.publishedPlan("rc-w1").Kubernetes.IgnorePreflightErrors).To(ConsistOf("SystemVerification"))
}

// TestRetryThroughUpdateNode: the single-node path's calls (UpdateNode) honour the
// Machine's retry as the hook does, with the same plan Secret: once the operator
// has annotated the Machine and removed the KubeadmControlPlane's hold-failed, the
// next call builds the plan again from the current policy.
func TestRetryThroughUpdateNode(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("ru-w1", "v1.35.0", false)
	f.node("ru-peer", "v1.35.0", false)
	m := f.machine("m-ru-w1", "ru-w1", "v1.36.0", false)
	req := f.request(m, nil)
	failedHash := f.rollBack(f.coordinator(), req, "ru-w1")

	bootstrap, err := toUnstructured(req.Desired.BootstrapConfig)
	g.Expect(err).NotTo(HaveOccurred())
	infra, err := toUnstructured(req.Desired.InfrastructureMachine)
	g.Expect(err).NotTo(HaveOccurred())
	desired := DesiredNode{Machine: &req.Desired.Machine, BootstrapConfig: bootstrap, InfrastructureMachine: infra}
	pol, err := policy.Parse([]byte("kubeadm:\n  ignorePreflightErrors: [SystemVerification]\n"))
	g.Expect(err).NotTo(HaveOccurred())
	fixed := f.coordinator(func(o *Options) { o.Preflight = pol })
	out := fixed.UpdateNode(f.ctx, desired)
	g.Expect(out.Kind).To(Equal(OutcomeFailedFinal), "without a retry the failure stays: %s", out.Message)

	f.annotate(m, inplacev1.RetryAnnotation, "true")
	out = fixed.UpdateNode(f.ctx, desired)
	g.Expect(out.Kind).To(Equal(OutcomeInProgress), out.Message)
	g.Expect(out.Message).To(ContainSubstring("retrying node ru-w1"))
	for range 3 {
		if out = fixed.UpdateNode(f.ctx, desired); strings.Contains(out.Message, "pick up plan") {
			break
		}
	}
	g.Expect(out.Message).To(ContainSubstring("pick up plan"))
	g.Expect(f.getNode("ru-w1").Annotations[inplacev1.DesiredPlanAnnotation]).NotTo(Equal(failedHash))
	g.Expect(f.publishedPlan("ru-w1").Kubernetes.IgnorePreflightErrors).To(ConsistOf("SystemVerification"))
}
