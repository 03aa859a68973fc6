package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// closedUntilSaturday is a maintenance window closed at the staging fixture's
// start (Tuesday 2026-12-01 10:00 UTC); it opens at 2026-12-05T01:00:00Z.
const closedUntilSaturday = "Sat 02:00-06:00 Europe/Berlin"

const waitingForSaturday = "waiting for a maintenance window: the maintenance window is closed; next opening 2026-12-05T01:00:00Z"

// TestStageAheadOfTheMaintenanceWindow: a closed maintenance window no longer
// holds the download. The node (a real agent-side Stager, downloading from a
// loopback server) stages the plan while it serves, uncordoned and unchanged;
// the update then waits, staged, with that in its message, for days past the
// staging deadline without expiring; when the window opens the node is cordoned
// at once and nothing is downloaded again.
func TestStageAheadOfTheMaintenanceWindow(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	self, err := os.Executable()
	g.Expect(err).NotTo(HaveOccurred())
	exe, err := os.ReadFile(self)
	g.Expect(err).NotTo(HaveOccurred())
	var downloads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		downloads.Add(1)
		_, _ = w.Write(exe)
	}))
	defer srv.Close()
	pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "%[2]s/kubeadm", digest: "%[3]s"}
      kubelet: {url: "%[2]s/kubelet", digest: "%[3]s"}
`, runtime.GOOS+"/"+runtime.GOARCH, srv.URL, sha(exe)))
	g.Expect(err).NotTo(HaveOccurred())

	f.node("sa1", "v1.35.0", false)
	f.node("sa1-peer", "v1.35.0", false)
	n := f.getNode("sa1")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	store := &artifact.Store{Root: t.TempDir()}
	stager := &agent.Stager{Store: store, Client: cs, NodeName: "sa1", Log: logr.Discard(),
		Backends: func(string) (backend.Backend, error) { return none.New(), nil }}
	agentStages := func() {
		t.Helper()
		g.Expect(stager.Reconcile(context.Background(), f.getNode("sa1"), f.planSecret("sa1"), testAgentKey)).To(Succeed())
	}

	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) // Tuesday
	var clock atomic.Int64
	at := func(when time.Time) { clock.Store(when.Unix()) }
	at(start)
	f.annotate(f.cluster(), inplacev1.MaintenanceWindowsAnnotation, closedUntilSaturday)
	c := f.coordinator(func(o *Options) {
		o.Binaries = pol
		o.Deadlines = Deadlines{Staging: 10 * time.Minute}
		o.Now = func() time.Time { return time.Unix(clock.Load(), 0).UTC() }
	})
	m := f.machine("m-sa1", "sa1", "v1.36.3", false)
	req := f.request(m, nil)

	// Window closed: asked to stage, not cordoned, and the message says both.
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(HavePrefix("step 1/6: asked the agent on node sa1 to stage plan "))
	g.Expect(resp.Message).To(HaveSuffix("; " + waitingForSaturday + "; node sa1 not started"))
	node := f.getNode("sa1")
	hash := node.Annotations[inplacev1.StagePlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())
	g.Expect(node.Spec.Unschedulable).To(BeFalse())
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(node.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(*f.clusterCondition()).To(HavePrefix(inplacev1.ReasonWindowClosed + ":"))
	rec := protocol.DecodePhaseRecord(f.machineAnnotations(m)[inplacev1.UpdatePhaseAnnotation])
	g.Expect(rec.Phase).To(Equal(protocol.UpdatePhaseStaging), "staging ahead is timed as staging")
	g.Expect(rec.Since).To(Equal(start))

	agentStages()
	fetched := downloads.Load()
	g.Expect(fetched).To(BeNumerically(">", 0))
	g.Expect(store.Has(sha(exe))).To(BeTrue())
	staged := f.getNode("sa1").Annotations[inplacev1.StagingStatusAnnotation]

	// Staged: waiting for the window, visibly, for days past the staging deadline.
	for _, after := range []time.Duration{time.Minute, 11 * time.Minute, 3 * 24 * time.Hour} {
		at(start.Add(after))
		resp = call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), "%s: %s", after, resp.Message)
		g.Expect(resp.Message).To(Equal("step 1/6: node sa1 staged plan " + short(hash) + "; " + waitingForSaturday + "; node sa1 not started"))
		g.Expect(resp.RetryAfterSeconds).To(Equal(int32(15)))
		g.Expect(f.getNode("sa1").Spec.Unschedulable).To(BeFalse())
	}
	rec = protocol.DecodePhaseRecord(f.machineAnnotations(m)[inplacev1.UpdatePhaseAnnotation])
	g.Expect(rec.Expired.IsZero()).To(BeTrue())
	g.Expect(rec.Phase).To(Equal(protocol.UpdatePhaseStaged), "the Machine says, in its phase record, that the update is staged and waiting")
	g.Expect(rec.Since).To(Equal(start.Add(time.Minute)), "written once, when staging ended")
	g.Expect(f.machineCondition(m)).To(BeNil())
	g.Expect(f.fleetState().Failures).To(BeEmpty())

	// The window opens: cordoned and published at once, the staged plan as is.
	at(time.Date(2026, 12, 5, 1, 30, 0, 0, time.UTC))
	callUntil(t, c, req, "pick up plan "+short(hash), 3)
	node = f.getNode("sa1")
	g.Expect(node.Spec.Unschedulable).To(BeTrue())
	g.Expect(node.Annotations[inplacev1.DesiredPlanAnnotation]).To(Equal(hash))
	g.Expect(node.Annotations[inplacev1.StagingStatusAnnotation]).To(Equal(staged), "not asked to stage again")
	g.Expect(protocol.DecodePhaseRecord(f.machineAnnotations(m)[inplacev1.UpdatePhaseAnnotation]).Phase).NotTo(Equal(protocol.UpdatePhaseStaged), "no longer waiting")
	agentStages()
	g.Expect(downloads.Load()).To(Equal(fetched), "nothing downloaded again")
}

// TestStagingAheadFailsBeforeTheWindow: what goes wrong while a node stages
// ahead of a closed window is answered before the window opens, the node never
// cordoned: a download that stalls past the staging deadline and a digest
// mismatch fail the update and count against the failure budget; an unreachable
// source is answered Failure and asked again.
func TestStagingAheadFailsBeforeTheWindow(t *testing.T) {
	tests := []struct {
		name     string
		reason   string // the agent's report; "" reports progress only
		after    time.Duration
		wantMsg  string
		counted  bool
		askAgain bool
	}{
		{name: "stalled", after: 11 * time.Minute,
			wantMsg: "phase Staging of plan", counted: true},
		{name: "digest", reason: protocol.StageReasonDigestMismatch, after: time.Minute,
			wantMsg: "(kubeadm, DigestMismatch)", counted: true},
		{name: "unreachable", reason: protocol.StageReasonUnreachable, after: time.Minute,
			wantMsg: "(kubeadm, SourceUnreachable)", askAgain: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			node := "sf-" + tt.name
			f, c, req, m, clock := stagingFixture(t, node, Deadlines{Staging: 10 * time.Minute})
			f.annotate(f.cluster(), inplacev1.MaintenanceWindowsAnnotation, closedUntilSaturday)
			g.Expect(call(c, req).Message).To(ContainSubstring("asked the agent on node " + node + " to stage plan"))
			hash := f.getNode(node).Annotations[inplacev1.StagePlanAnnotation]
			g.Expect(hash).NotTo(BeEmpty())
			st := protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaging, Item: protocol.StageKubeadm, Items: 2, Bytes: 1 << 20, Size: 4 << 20}
			if tt.reason != "" {
				st.Phase, st.Reason, st.Message = protocol.StagePhaseFailed, tt.reason, "from https://dl.example.invalid/kubeadm"
			}
			v, err := protocol.EncodeStagingStatus(st)
			g.Expect(err).NotTo(HaveOccurred())
			f.annotate(f.getNode(node), inplacev1.StagingStatusAnnotation, v)

			clock.Store(start.Add(tt.after).Unix())
			resp := call(c, req)
			g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure), resp.Message)
			g.Expect(resp.Message).To(ContainSubstring(tt.wantMsg))
			g.Expect(resp.Message).To(ContainSubstring("the node was not cordoned"))
			n := f.getNode(node)
			g.Expect(n.Spec.Unschedulable).To(BeFalse())
			g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
			if tt.counted {
				g.Expect(f.fleetState().Failures).To(HaveLen(1), "counted against the failure budget")
				g.Expect(f.machineCondition(m)).NotTo(BeNil())
			} else {
				g.Expect(f.fleetState().Failures).To(BeEmpty())
				g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventStagingFailed))
			}
			if tt.askAgain {
				g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.StagingStatusAnnotation), "asked again")
				resp = call(c, req)
				g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
				g.Expect(resp.Message).To(ContainSubstring("asked the agent on node " + node + " to stage plan " + short(hash)))
				g.Expect(resp.Message).To(ContainSubstring(waitingForSaturday))
			}
		})
	}
}

// TestDownloadWindows: with download windows, staging ahead of a closed
// maintenance window begins only inside one, and nothing is timed before it
// does; a node asked already stages on when its download window closes. Windows
// that do not parse hold the download.
func TestDownloadWindows(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) // Tuesday
	f, c, req, m, clock := stagingFixture(t, "dw1", Deadlines{Staging: 6 * time.Hour})
	f.annotate(f.cluster(), inplacev1.MaintenanceWindowsAnnotation, closedUntilSaturday)
	f.annotate(f.cluster(), inplacev1.DownloadWindowsAnnotation, "Mon-Fri 01:00-05:00 UTC")

	for _, after := range []time.Duration{0, 8 * time.Hour} {
		clock.Store(start.Add(after).Unix())
		resp := call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
		g.Expect(resp.Message).To(MatchRegexp(`^step 1/6: waiting for a download window to stage plan [0-9a-f]{12}: the download window is closed; next opening 2026-12-02T01:00:00Z; ` + waitingForSaturday + `; node dw1 not started$`))
		g.Expect(f.getNode("dw1").Annotations).NotTo(HaveKey(inplacev1.StagePlanAnnotation))
		g.Expect(f.machineAnnotations(m)).NotTo(HaveKey(inplacev1.UpdatePhaseAnnotation), "nothing timed before staging begins")
	}

	opened := time.Date(2026, 12, 2, 1, 30, 0, 0, time.UTC)
	clock.Store(opened.Unix())
	g.Expect(call(c, req).Message).To(ContainSubstring("asked the agent on node dw1 to stage plan"))
	g.Expect(f.getNode("dw1").Annotations).To(HaveKey(inplacev1.StagePlanAnnotation))
	g.Expect(protocol.DecodePhaseRecord(f.machineAnnotations(m)[inplacev1.UpdatePhaseAnnotation]).Since).To(Equal(opened))

	// The download window closes with the node still staging: it stages on.
	clock.Store(time.Date(2026, 12, 2, 5, 30, 0, 0, time.UTC).Unix())
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("asked the agent on node dw1 to stage plan"))
	g.Expect(f.getNode("dw1").Annotations).To(HaveKey(inplacev1.StagePlanAnnotation))

	f.annotate(f.cluster(), inplacev1.DownloadWindowsAnnotation, "Someday 01:00-05:00 UTC")
	f.annotate(f.getNode("dw1"), inplacev1.StagePlanAnnotation, "-")
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("the download windows do not parse: invalid maintenance window"))
	g.Expect(f.getNode("dw1").Annotations).NotTo(HaveKey(inplacev1.StagePlanAnnotation))
}

// TestStagedAheadPlanGoesStale: a plan staged days before its window is keyed
// by its identity. The Machine's spec changes meanwhile: the new plan is staged
// (the old one's Staged report does not count for it), and the window opens on
// the new plan. A policy change that leaves the desired state as it is (here a
// kubelet of another digest for the same version) keeps the staged plan: one
// plan per desired state (nodeplan.KeepPublished).
func TestStagedAheadPlanGoesStale(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	binaries := func(kubelet136 string) *policy.Policy {
		pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "https://dl.example.invalid/v1.36.3/kubeadm", digest: "%[2]s"}
      kubelet: {url: "https://dl.example.invalid/v1.36.3/kubelet", digest: "%[3]s"}
  v1.36.4:
    %[1]s:
      kubeadm: {url: "https://dl.example.invalid/v1.36.4/kubeadm", digest: "%[4]s"}
      kubelet: {url: "https://dl.example.invalid/v1.36.4/kubelet", digest: "%[4]s"}
`, platform, "sha256:"+fmt.Sprintf("%064x", 1), kubelet136, "sha256:"+fmt.Sprintf("%064x", 2)))
		g.Expect(err).NotTo(HaveOccurred())
		return pol
	}
	f.node("sp1", "v1.35.0", false)
	f.node("sp1-peer", "v1.35.0", false)
	n := f.getNode("sp1")
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())
	f.annotate(f.cluster(), inplacev1.MaintenanceWindowsAnnotation, closedUntilSaturday)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Unix())
	coordinatorWith := func(pol *policy.Policy) *Coordinator {
		return f.coordinator(func(o *Options) {
			o.Binaries = pol
			o.Now = func() time.Time { return time.Unix(clock.Load(), 0).UTC() }
		})
	}
	c := coordinatorWith(binaries("sha256:" + fmt.Sprintf("%064x", 1)))
	m := f.machine("m-sp1", "sp1", "v1.36.3", false)
	req := f.request(m, nil)
	agentStaged := func(hash string) {
		t.Helper()
		v, err := protocol.EncodeStagingStatus(protocol.StagingStatus{PlanHash: hash, Phase: protocol.StagePhaseStaged, Items: 2, Done: 2})
		g.Expect(err).NotTo(HaveOccurred())
		f.annotate(f.getNode("sp1"), inplacev1.StagingStatusAnnotation, v)
	}

	call(c, req)
	first := f.getNode("sp1").Annotations[inplacev1.StagePlanAnnotation]
	g.Expect(first).NotTo(BeEmpty())
	agentStaged(first)
	g.Expect(call(c, req).Message).To(HavePrefix("step 1/6: node sp1 staged plan " + short(first) + ";"))

	// The policy changes, the desired state does not: the staged plan stays.
	c = coordinatorWith(binaries("sha256:" + fmt.Sprintf("%064x", 3)))
	g.Expect(call(c, req).Message).To(HavePrefix("step 1/6: node sp1 staged plan " + short(first) + ";"))
	g.Expect(f.getNode("sp1").Annotations[inplacev1.StagePlanAnnotation]).To(Equal(first))

	// The spec changes shortly before the window: the new plan is staged; the
	// old report does not count.
	clock.Store(time.Date(2026, 12, 5, 0, 50, 0, 0, time.UTC).Unix())
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	stored.Spec.Version = "v1.36.4"
	g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
	req = f.request(m, nil)
	resp := call(c, req)
	second := f.getNode("sp1").Annotations[inplacev1.StagePlanAnnotation]
	g.Expect(second).NotTo(Equal(first))
	g.Expect(resp.Message).To(HavePrefix("step 1/6: asked the agent on node sp1 to stage plan " + short(second)))
	g.Expect(f.getNode("sp1").Spec.Unschedulable).To(BeFalse())

	// The window opens before the new plan is staged: it is not cordoned until it is.
	clock.Store(time.Date(2026, 12, 5, 1, 5, 0, 0, time.UTC).Unix())
	g.Expect(call(c, req).Message).To(ContainSubstring("to stage plan " + short(second)))
	g.Expect(f.getNode("sp1").Spec.Unschedulable).To(BeFalse())
	agentStaged(second)
	callUntil(t, c, req, "pick up plan "+short(second), 3)
	g.Expect(f.getNode("sp1").Annotations[inplacev1.DesiredPlanAnnotation]).To(Equal(second))
}
