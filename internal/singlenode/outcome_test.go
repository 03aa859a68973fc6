package singlenode

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

// TestClassify: the step follows the outcome's Kind and Cause. The messages are
// chosen so that the old message matching would have got each case wrong: a
// rolled-back update reworded, an API error that quotes the agent's phrase.
func TestClassify(t *testing.T) {
	out := func(kind coordinator.OutcomeKind, cause coordinator.Cause, retry int32, msg string) coordinator.Outcome {
		return coordinator.Outcome{Kind: kind, Cause: cause, RetryAfterSeconds: retry, Message: msg}
	}
	tests := []struct {
		name string
		out  coordinator.Outcome
		want Verdict
	}{
		{"done", out(coordinator.OutcomeDone, "", 0, "committed"), Verdict{Step: StepDone, Reason: inplacev1.ReasonSucceeded, Message: "committed"}},
		{"in progress", out(coordinator.OutcomeInProgress, "", 5, "step 2/5"), Verdict{Step: StepWait, RetryAfter: 5 * time.Second, Reason: inplacev1.ReasonInProgress, Message: "step 2/5"}},
		{"in progress without retry still waits", out(coordinator.OutcomeInProgress, "", 0, "x"), Verdict{Step: StepWait, RetryAfter: time.Second, Reason: inplacev1.ReasonInProgress, Message: "x"}},
		{
			"rolled back, whatever the words",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseRolledBack, 0, "node n1 went back to where it was"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonRolledBack, Message: "node n1 went back to where it was"},
		},
		{
			"agent failed",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseAgentFailed, 0, "plan refused"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonFailed, Message: "plan refused"},
		},
		{
			"degraded is final",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseDegraded, 0, "needs repair"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonDegraded, Message: "needs repair"},
		},
		{
			"plan never picked up is final",
			out(coordinator.OutcomeFailedFinal, coordinator.CausePlanNotPickedUp, 0, "withdrawn"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonPlanNotPickedUp, Message: "withdrawn"},
		},
		{
			"a phase past its deadline is final",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseDeadlineExceeded, 0, "phase Rebooting passed its deadline"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonDeadlineExceeded, Message: "phase Rebooting passed its deadline"},
		},
		{
			"an unmapped OS image change is refused",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseOSImageUnmapped, 0, "not touched"),
			Verdict{Step: StepFail, Reason: inplacev1.ReasonRefused, Message: "not touched"},
		},
		{
			"cancelled by the operator is not a failure",
			out(coordinator.OutcomeFailedFinal, coordinator.CauseCancelled, 0, "node n1: update cancelled by annotation"),
			Verdict{Step: StepCancelled, Reason: inplacev1.ReasonCancelled, Message: "node n1: update cancelled by annotation"},
		},
		{
			"API error quoting the agent's phrase is retried",
			out(coordinator.OutcomeFailedRetryable, coordinator.CauseWorkloadAPI, 0, "the agent rolled back plan: connection refused"),
			Verdict{Step: StepWait, RetryAfter: retryAfterFailure, Reason: inplacev1.ReasonInProgress, Message: "retrying: the agent rolled back plan: connection refused"},
		},
		{
			"unknown kind is retried, never done",
			out("Bogus", "", 0, "?"),
			Verdict{Step: StepWait, RetryAfter: retryAfterFailure, Reason: inplacev1.ReasonInProgress, Message: "retrying: the coordinator answered an outcome of unknown kind Bogus: ?"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Classify(tt.out)).To(Equal(tt.want))
		})
	}
}
