package singlenode

import (
	"time"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

// Step is what the controller does with one answer of the coordinator.
type Step string

const (
	// StepDone: the node is updated and its gates passed; align the objects.
	StepDone Step = "Done"
	// StepWait: ask again after RetryAfter (the update is in progress, or it failed
	// around the node and may succeed on a later call, as upstream retries every
	// Failure).
	StepWait Step = "Wait"
	// StepFail: the node update of this target is over and failed (the agent rolled
	// the node back or failed its plan, the node is degraded, the plan was never
	// picked up, the desired objects are unusable). Final for the current target:
	// repeating it would mean another etcd snapshot and another upgrade attempt on the
	// only control-plane node without anyone asking.
	StepFail Step = "Fail"
	// StepCancelled: the coordinator withdrew the update because the Machine
	// carries the cancel annotation (cause Cancelled), before the agent's first
	// destructive action. Not a failure: nothing records it as one, and the update
	// starts again once the annotation is gone.
	StepCancelled Step = "Cancelled"
)

// retryAfterFailure paces retries of retryable failures.
const retryAfterFailure = 20 * time.Second

// Verdict is Classify's answer.
type Verdict struct {
	Step       Step
	RetryAfter time.Duration
	// Reason is the condition reason (inplacev1.Reason*).
	Reason string
	// Message is for humans: conditions and Events.
	Message string
}

// Classify maps the coordinator's typed outcome to the controller's next step. It
// decides on the outcome's Kind and Cause only, never on its Message.
func Classify(out coordinator.Outcome) Verdict {
	msg := out.Message
	switch out.Kind {
	case coordinator.OutcomeDone:
		return Verdict{Step: StepDone, Reason: inplacev1.ReasonSucceeded, Message: msg}
	case coordinator.OutcomeInProgress:
		retry := time.Duration(out.RetryAfterSeconds) * time.Second
		if retry <= 0 {
			retry = time.Second
		}
		return Verdict{Step: StepWait, RetryAfter: retry, Reason: inplacev1.ReasonInProgress, Message: msg}
	case coordinator.OutcomeFailedFinal:
		if out.Cause == coordinator.CauseCancelled {
			return Verdict{Step: StepCancelled, Reason: inplacev1.ReasonCancelled, Message: msg}
		}
		return Verdict{Step: StepFail, Reason: failureReason(out.Cause), Message: msg}
	case coordinator.OutcomeFailedRetryable:
		return Verdict{Step: StepWait, RetryAfter: retryAfterFailure, Reason: inplacev1.ReasonInProgress, Message: "retrying: " + msg}
	}
	// An outcome of no known kind is neither done nor failed: ask again.
	return Verdict{Step: StepWait, RetryAfter: retryAfterFailure, Reason: inplacev1.ReasonInProgress,
		Message: "retrying: the coordinator answered an outcome of unknown kind " + string(out.Kind) + ": " + msg}
}

// failureReason is the condition reason of a final failure, by its typed cause.
func failureReason(c coordinator.Cause) string {
	switch c {
	case coordinator.CauseRolledBack:
		return inplacev1.ReasonRolledBack
	case coordinator.CauseDegraded:
		return inplacev1.ReasonDegraded
	case coordinator.CausePlanNotPickedUp:
		return inplacev1.ReasonPlanNotPickedUp
	case coordinator.CauseDeadlineExceeded:
		return inplacev1.ReasonDeadlineExceeded
	case coordinator.CauseOSImageUnmapped:
		// Nothing was touched: a change that cannot be done in place, as the
		// planner's refusals.
		return inplacev1.ReasonRefused
	}
	return inplacev1.ReasonFailed
}
