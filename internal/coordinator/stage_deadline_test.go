package coordinator

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestStagingDeadline: a node asked to stage whose agent never reports Staged
// (no agent, or one stuck on a stalled source) fails the update once the stage
// deadline passes: Failure with the cause, the node never cordoned, no plan
// desired; the next call asks again with a new deadline.
func TestStagingDeadline(t *testing.T) {
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
	f.node("sd1", "v1.35.0", false)
	f.node("sd1-peer", "v1.35.0", false)
	n := f.getNode("sd1")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())

	var clock atomic.Int64
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock.Store(start.Unix())
	c := f.coordinator(func(o *Options) {
		o.Binaries = pol
		o.StagingTimeout = 10 * time.Minute
		o.Now = func() time.Time { return time.Unix(clock.Load(), 0).UTC() }
	})
	req := f.request(f.machine("m-sd1", "sd1", "v1.36.3", false), nil)

	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent on node sd1 to stage plan"))
	node := f.getNode("sd1")
	g.Expect(node.Annotations[inplacev1.StageDeadlineAnnotation]).To(Equal("2026-12-01T10:10:00Z"))

	// Within the deadline (a progress report, no Staged): still waiting.
	hash := node.Annotations[inplacev1.StagePlanAnnotation]
	st, err := protocol.EncodeStagingStatus(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaging,
		Item: protocol.StageKubeadm, Bytes: 1 << 20, Size: 4 << 20, Items: 2})
	g.Expect(err).NotTo(HaveOccurred())
	node.Annotations[inplacev1.StagingStatusAnnotation] = st
	g.Expect(f.wl.Update(f.ctx, node)).To(Succeed())
	clock.Store(start.Add(9 * time.Minute).Unix())
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("kubeadm 1.0 of 4.0 MiB"))
	g.Expect(f.getNode("sd1").Annotations[inplacev1.StageDeadlineAnnotation]).To(Equal("2026-12-01T10:10:00Z"), "a repeated ask keeps the deadline")

	// Past it: the update fails before cordon.
	clock.Store(start.Add(11 * time.Minute).Unix())
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("did not stage plan"))
	g.Expect(resp.Message).To(ContainSubstring("DeadlineExceeded"))
	g.Expect(resp.Message).To(ContainSubstring("last report: kubeadm 1.0 of 4.0 MiB"))
	g.Expect(resp.Message).To(ContainSubstring("the node was not cordoned"))
	node = f.getNode("sd1")
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.StageDeadlineAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.StagingStatusAnnotation))
	g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventStagingFailed))

	// CAPI calls again: a new request with a new deadline.
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent"))
	g.Expect(f.getNode("sd1").Annotations[inplacev1.StageDeadlineAnnotation]).To(Equal("2026-12-01T10:21:00Z"))
}

func TestStagingDeadlineVerdict(t *testing.T) {
	const hash = "0123456789abcdef0123456789abcdef"
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	wait := Decision{Action: ActWait, Message: "waiting"}
	tests := []struct {
		name string
		ann  map[string]string
		want Action
	}{
		{"no deadline", map[string]string{inplacev1.StagePlanAnnotation: hash}, ActWait},
		{"before the deadline", map[string]string{inplacev1.StagePlanAnnotation: hash, inplacev1.StageDeadlineAnnotation: "2026-12-01T10:00:01Z"}, ActWait},
		{"at the deadline", map[string]string{inplacev1.StagePlanAnnotation: hash, inplacev1.StageDeadlineAnnotation: "2026-12-01T10:00:00Z"}, ActWait},
		{"past the deadline", map[string]string{inplacev1.StagePlanAnnotation: hash, inplacev1.StageDeadlineAnnotation: "2026-12-01T09:59:59Z"}, ActReportFailure},
		{"the deadline of another plan", map[string]string{inplacev1.StagePlanAnnotation: "other", inplacev1.StageDeadlineAnnotation: "2026-12-01T09:00:00Z"}, ActWait},
		{"garbled deadline", map[string]string{inplacev1.StagePlanAnnotation: hash, inplacev1.StageDeadlineAnnotation: "yesterday"}, ActWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := stagingDeadline(wait, "n1", hash, tt.ann, now)
			g.Expect(d.Action).To(Equal(tt.want))
			if tt.want == ActReportFailure {
				g.Expect(d.Cause).To(Equal(CauseStagingFailed))
				g.Expect(d.Message).To(ContainSubstring("no report from its agent"))
			}
		})
	}
}
