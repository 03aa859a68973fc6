package status

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func stagingStatus(t *testing.T, s protocol.StagingStatus) nodeOpt {
	t.Helper()
	raw, err := protocol.EncodeStagingStatus(s)
	if err != nil {
		t.Fatal(err)
	}
	return annotate(inplacev1.StagingStatusAnnotation, raw)
}

// TestBuildMachineStaging: a node asked to stage its next plan (before it is
// cordoned) shows the agent's staging progress: artifact and bytes, or the cause
// of a failed staging; a staging report of another plan, or of a plan already
// desired, is not shown.
func TestBuildMachineStaging(t *testing.T) {
	committedA := []nodeOpt{annotate(inplacev1.DesiredPlanAnnotation, planA), annotate(inplacev1.CurrentPlanAnnotation, planA),
		agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseCommitted, Step: 7, Steps: 7})}
	tests := []struct {
		name    string
		opts    []nodeOpt
		want    *Staging
		phase   protocol.Phase
		details string
	}{
		{
			name:  "nothing to stage: the committed plan shows",
			opts:  committedA,
			phase: protocol.PhaseCommitted,
		},
		{
			name: "bytes of the artifact in progress",
			opts: append(committedA, annotate(inplacev1.StagePlanAnnotation, planB),
				stagingStatus(t, protocol.StagingStatus{PlanHash: planB, Phase: protocol.StagePhaseStaging, Item: protocol.StageKubelet,
					Bytes: 12 << 20, Size: 58 << 20, Done: 1, Items: 2})),
			want: &Staging{Plan: planB, Phase: protocol.StagePhaseStaging, Item: protocol.StageKubelet, Bytes: 12 << 20, Size: 58 << 20,
				Done: 1, Items: 2, Progress: "kubelet 12.0 of 58.0 MiB, 1 of 2 artifacts staged"},
			phase:   protocol.PhaseStaging,
			details: "kubelet 12.0 of 58.0 MiB, 1 of 2 artifacts staged",
		},
		{
			name:    "asked, no report yet",
			opts:    append(committedA, annotate(inplacev1.StagePlanAnnotation, planB)),
			want:    &Staging{Plan: planB, Progress: "waiting for the agent to stage plan " + short(planB)},
			phase:   protocol.PhaseStaging,
			details: "waiting for the agent to stage plan " + short(planB),
		},
		{
			name: "a report of an older plan is not this plan's progress",
			opts: append(committedA, annotate(inplacev1.StagePlanAnnotation, planB),
				stagingStatus(t, protocol.StagingStatus{PlanHash: planA, Phase: protocol.StagePhaseStaged, Done: 2, Items: 2})),
			want:    &Staging{Plan: planB, Progress: "waiting for the agent to stage plan " + short(planB)},
			phase:   protocol.PhaseStaging,
			details: "waiting for the agent to stage plan " + short(planB),
		},
		{
			name: "failed staging shows its cause",
			opts: append(committedA, annotate(inplacev1.StagePlanAnnotation, planB),
				stagingStatus(t, protocol.StagingStatus{PlanHash: planB, Phase: protocol.StagePhaseFailed, Item: protocol.StageOSImage,
					Items: 1, Reason: protocol.StageReasonDigestMismatch, Message: "content does not match its digest"})),
			want: &Staging{Plan: planB, Phase: protocol.StagePhaseFailed, Item: protocol.StageOSImage, Items: 1, Reason: protocol.StageReasonDigestMismatch,
				Progress: "staging failed: DigestMismatch: content does not match its digest"},
			phase:   protocol.PhaseStaging,
			details: "staging failed: DigestMismatch: content does not match its digest",
		},
		{
			name: "the staged plan is desired now: the agent's status tells",
			opts: []nodeOpt{annotate(inplacev1.DesiredPlanAnnotation, planB), annotate(inplacev1.CurrentPlanAnnotation, planA),
				annotate(inplacev1.StagePlanAnnotation, planB),
				stagingStatus(t, protocol.StagingStatus{PlanHash: planB, Phase: protocol.StagePhaseStaged, Done: 2, Items: 2}),
				agentStatus(t, protocol.NodeStatus{PlanHash: planB, Phase: protocol.PhaseApplying, Step: 2, Steps: 7, Action: "drain"})},
			phase:   protocol.PhaseApplying,
			details: "drain",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mv := buildMachine(ptr(machine("m")), node("m", "v1.35.0", tt.opts...), true, now)
			g.Expect(mv.Staging).To(Equal(tt.want))
			g.Expect(mv.Phase).To(Equal(tt.phase))
			if tt.details != "" {
				g.Expect(details(mv)).To(Equal(tt.details))
			}
			g.Expect(mv.Problems).To(BeEmpty())
		})
	}
}

func ptr[T any](v T) *T { return &v }

// stagedAhead is the coordinator's phase record of an update staged ahead of a
// closed maintenance window, on a Machine Cluster API updates.
func stagedAhead(m *clusterv1.Machine) {
	m.Annotations = map[string]string{inplacev1.UpdatePhaseAnnotation: protocol.PhaseRecord{Plan: planB, Phase: protocol.UpdatePhaseStaged,
		Start: now.Add(-2 * time.Hour), Since: now.Add(-time.Hour)}.Encode()}
	withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now.Add(-2*time.Hour))(m)
}

// TestBuildMachineStagedForWindow: a Machine whose update is staged ahead of a
// closed maintenance window says so, from the Machine alone (machinestate.Staged),
// with the node's staging report when the workload cluster answers and without
// it when it does not.
func TestBuildMachineStagedForWindow(t *testing.T) {
	stagedB := []nodeOpt{annotate(inplacev1.CurrentPlanAnnotation, planA), annotate(inplacev1.StagePlanAnnotation, planB),
		stagingStatus(t, protocol.StagingStatus{PlanHash: planB, Phase: protocol.StagePhaseStaged, Done: 2, Items: 2})}
	tests := []struct {
		name      string
		m         clusterv1.Machine
		node      *corev1.Node
		reachable bool
		staged    bool
		phase     string
		details   string
	}{
		{name: "staged, with the node's report", m: machine("m", stagedAhead), node: node("m", "v1.35.0", stagedB...), reachable: true,
			staged: true, phase: "Staged", details: "staged, waiting for a maintenance window: 2 of 2 artifacts staged"},
		{name: "staged, workload cluster unreachable", m: machine("m", stagedAhead),
			staged: true, phase: "Staged", details: "staged, waiting for a maintenance window"},
		{name: "staged on the node, but no record: still staging as far as the coordinator knows", m: machine("m"),
			node: node("m", "v1.35.0", stagedB...), reachable: true, phase: "Staging", details: "2 of 2 artifacts staged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mv := buildMachine(&tt.m, tt.node, tt.reachable, now)
			g.Expect(mv.StagedForWindow).To(Equal(tt.staged))
			g.Expect(phaseCell(mv, tt.reachable)).To(Equal(tt.phase))
			g.Expect(details(mv)).To(Equal(tt.details))
		})
	}
}

// TestBuildFleetStaged: the Cluster's fleet view lists its staged Machines, says
// whether the update as a whole waits (machinestate.StagedAndWaiting), and shows
// the Cluster's download windows.
func TestBuildFleetStaged(t *testing.T) {
	c := cluster("c1")
	c.Annotations = map[string]string{inplacev1.DownloadWindowsAnnotation: "Mon-Fri 22:00-06:00 UTC"} // now is Monday 09:00
	next := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	closed := false
	staging := machine("m3", withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now))
	tests := []struct {
		name     string
		machines []clusterv1.Machine
		want     FleetView
		render   string
	}{
		{name: "every started Machine staged", machines: []clusterv1.Machine{machine("m2", stagedAhead), machine("m1", stagedAhead), machine("m4")},
			want: FleetView{Guard: "on", DownloadWindows: "Mon-Fri 22:00-06:00 UTC", DownloadWindowOpen: &closed, DownloadNextOpening: &next,
				Staged: []string{"m1", "m2"}, StagedAndWaiting: true},
			render: `  guard: on; failure budget: no failures recorded
  download windows "Mon-Fri 22:00-06:00 UTC": closed, next opening 2026-11-30T22:00:00Z
  staged, waiting for a maintenance window: m1, m2
`},
		{name: "one still staging", machines: []clusterv1.Machine{machine("m1", stagedAhead), staging},
			want: FleetView{Guard: "on", DownloadWindows: "Mon-Fri 22:00-06:00 UTC", DownloadWindowOpen: &closed, DownloadNextOpening: &next,
				Staged: []string{"m1"}},
			render: `  guard: on; failure budget: no failures recorded
  download windows "Mon-Fri 22:00-06:00 UTC": closed, next opening 2026-11-30T22:00:00Z
  staged (the rest of the update is under way or needs a human): m1
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			fv := buildFleet(&c, tt.machines, now)
			g.Expect(fv).To(Equal(tt.want))
			var buf bytes.Buffer
			renderFleet(&buf, fv)
			g.Expect(buf.String()).To(Equal(tt.render))
		})
	}
}
