package coordinator

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// stagingFixture is a node whose plan downloads kubeadm and kubelet (so it is
// staged before cordon), with a coordinator on a clock the test moves.
func stagingFixture(t *testing.T, node string, deadlines Deadlines) (*fixture, *Coordinator, *runtimehooksv1.UpdateMachineRequest, *clusterv1.Machine, *atomic.Int64) {
	t.Helper()
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	digest := "sha256:" + fmt.Sprintf("%064x", 7)
	pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "https://dl.example.invalid/kubeadm", digest: "%[2]s"}
      kubelet: {url: "https://dl.example.invalid/kubelet", digest: "%[2]s"}
`, platform, digest))
	g.Expect(err).NotTo(HaveOccurred())
	f.node(node, "v1.35.0", false)
	f.node(node+"-peer", "v1.35.0", false)
	n := f.getNode(node)
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())

	clock := &atomic.Int64{}
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Unix())
	c := f.coordinator(func(o *Options) {
		o.Binaries = pol
		o.Deadlines = deadlines
		o.Now = func() time.Time { return time.Unix(clock.Load(), 0).UTC() }
	})
	m := f.machine("m-"+node, node, "v1.36.3", false)
	return f, c, f.request(m, nil), m, clock
}

// TestStagingDeadline: a node asked to stage whose agent never reports Staged (no
// agent, or one stuck on a stalled source) fails the update once the staging
// deadline passes on the coordinator's clock, from the phase's date on the
// Machine; a deadline the node rewrites on itself changes nothing. The failure
// says what was last seen, counts against the failure budget and stays (the node
// is not asked again and again) until an operator retries. Before, the deadline
// was judged from the Node's own annotation and the next call asked again, for
// ever.
func TestStagingDeadline(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f, c, req, m, clock := stagingFixture(t, "sd1", Deadlines{Staging: 10 * time.Minute})

	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent on node sd1 to stage plan"))
	node := f.getNode("sd1")
	g.Expect(node.Annotations[inplacev1.StageTimeoutAnnotation]).To(Equal("10m0s"), "the agent's bound, a duration: no instant of this clock reaches the node")
	rec := protocol.DecodePhaseRecord(f.machineAnnotations(m)[inplacev1.UpdatePhaseAnnotation])
	g.Expect(rec.Phase).To(Equal(protocol.UpdatePhaseStaging))
	g.Expect(rec.Since).To(Equal(start))

	// Within the deadline (a progress report, no Staged): still waiting, even when
	// the node gives itself a day.
	hash := node.Annotations[inplacev1.StagePlanAnnotation]
	st, err := protocol.EncodeStagingStatus(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaging,
		Item: protocol.StageKubeadm, Bytes: 1 << 20, Size: 4 << 20, Items: 2})
	g.Expect(err).NotTo(HaveOccurred())
	node.Annotations[inplacev1.StagingStatusAnnotation] = st
	node.Annotations[inplacev1.StageTimeoutAnnotation] = "24h0m0s"
	g.Expect(f.wl.Update(f.ctx, node)).To(Succeed())
	clock.Store(start.Add(9 * time.Minute).Unix())
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("kubeadm 1.0 of 4.0 MiB"))

	// Past it: the update fails before cordon.
	clock.Store(start.Add(11 * time.Minute).Unix())
	for range 2 { // and stays failed: the node is not asked again
		resp = call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(ContainSubstring("phase Staging of plan " + hash[:12] + " passed its deadline of 10m0s (in it since 2026-12-01T10:00:00Z"))
		g.Expect(resp.Message).To(ContainSubstring("last seen: staging Staging: kubeadm 1.0 of 4.0 MiB"))
		g.Expect(resp.Message).To(ContainSubstring("the node was not cordoned"))
		clock.Store(start.Add(20 * time.Minute).Unix())
	}
	node = f.getNode("sd1")
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(node.Annotations[inplacev1.StagingStatusAnnotation]).To(Equal(st), "not asked to stage again")
	cond := f.machineCondition(m)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDeadlineExceeded))
	g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventDeadlineExceeded))
	g.Expect(f.fleetState().Failures).To(HaveLen(1), "counted against the failure budget")

	// The operator retries: staged again from the start, with the agent's bound.
	f.annotate(m, inplacev1.RetryAnnotation, "true")
	resp = call(c, req)
	g.Expect(resp.Message).To(ContainSubstring("retrying node sd1"))
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent"))
	g.Expect(f.getNode("sd1").Annotations[inplacev1.StageTimeoutAnnotation]).To(Equal("10m0s"))
}

// TestPermanentStagingFailure: a digest mismatch is not downloaded again and
// again: the update fails (Failure, node untouched), counts against the failure
// budget, and later calls answer the same until an operator retries. A transient
// cause (a source that does not answer) is asked again. Before, every staging
// failure was cleared and asked again, for ever.
func TestPermanentStagingFailure(t *testing.T) {
	g := NewWithT(t)
	f, c, req, m, _ := stagingFixture(t, "pf1", Deadlines{})
	call(c, req)
	hash := f.getNode("pf1").Annotations[inplacev1.StagePlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())
	report := func(reason string) string {
		v, err := protocol.EncodeStagingStatus(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseFailed, Item: protocol.StageKubeadm,
			Items: 2, Reason: reason, Message: "sha256 of https://dl.example.invalid/kubeadm is sha256:00..."})
		g.Expect(err).NotTo(HaveOccurred())
		n := f.getNode("pf1")
		n.Annotations[inplacev1.StagingStatusAnnotation] = v
		g.Expect(f.wl.Update(f.ctx, n)).To(Succeed())
		return v
	}

	report(protocol.StageReasonUnreachable)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(f.getNode("pf1").Annotations).NotTo(HaveKey(inplacev1.StagingStatusAnnotation), "a transient cause is asked again")
	g.Expect(f.fleetState().Failures).To(BeEmpty())

	v := report(protocol.StageReasonDigestMismatch)
	for range 2 {
		resp = call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(ContainSubstring("could not stage plan " + hash[:12] + " (kubeadm, DigestMismatch)"))
		g.Expect(f.getNode("pf1").Annotations[inplacev1.StagingStatusAnnotation]).To(Equal(v), "not downloaded again")
	}
	g.Expect(f.getNode("pf1").Spec.Unschedulable).To(BeFalse())
	g.Expect(f.fleetState().Failures).To(HaveLen(1))
	g.Expect(f.fleetState().Failures[0].Cause).To(HavePrefix(string(CauseStagingFailed)))
	g.Expect(f.machineCondition(m).Reason).To(Equal(inplacev1.ReasonFailed))

	f.annotate(m, inplacev1.RetryAnnotation, "true")
	call(c, req)
	g.Expect(f.getNode("pf1").Annotations).NotTo(HaveKey(inplacev1.StagingStatusAnnotation), "a retry stages again")
}
