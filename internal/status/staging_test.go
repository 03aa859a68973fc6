package status

import (
	"testing"

	. "github.com/onsi/gomega"

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
