package singlenode

import (
	"strings"
	"time"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// OutcomeKind is the meaning of one UpdateMachine answer.
type OutcomeKind string

const (
	// OutcomeDone: the node is updated and its gates passed (Success, retry 0).
	OutcomeDone OutcomeKind = "Done"
	// OutcomeInProgress: ask again after RetryAfter (Success, retry > 0).
	OutcomeInProgress OutcomeKind = "InProgress"
	// OutcomeFailed: the node update of this spec is over and failed: the agent rolled
	// the node back (or failed its plan). Final for the current target.
	OutcomeFailed OutcomeKind = "Failed"
	// OutcomeRetry: a Failure that did not touch the node's result (an API error, a
	// plan that cannot be built yet, a refused drain): asked again after RetryAfter,
	// as upstream retries every Failure.
	OutcomeRetry OutcomeKind = "Retry"
)

// retryAfterFailure paces retries of non-final failures.
const retryAfterFailure = 20 * time.Second

// agentVerdicts are the phrases with which the coordinator reports that the agent
// finished a plan unsuccessfully ("node N: the agent rolled back plan H: cause", see
// internal/coordinator decide.go). Only these end an attempt: every other Failure is
// an error around the node, not a result of it.
var agentVerdicts = []struct{ phrase, reason string }{
	{"the agent rolled back plan", v1alpha1.ReasonRolledBack},
	{"the agent failed plan", v1alpha1.ReasonFailed},
}

// Outcome is Classify's answer.
type Outcome struct {
	Kind       OutcomeKind
	RetryAfter time.Duration
	Message    string
	// Reason is the condition reason for a failure.
	Reason string
}

// Classify reads an UpdateMachine response with upstream's semantics
// (UpdateMachineResponse doc: Success + retryAfterSeconds > 0 is in progress, Success +
// 0 is done). Upstream retries every Failure forever; the single-node path treats the
// agent's verdict (rolled back, failed) as final for the current target, because
// repeating it would mean another etcd snapshot and another upgrade attempt on the only
// control-plane node without anyone asking; every other Failure is retried.
func Classify(resp *runtimehooksv1.UpdateMachineResponse) Outcome {
	if resp.GetStatus() == runtimehooksv1.ResponseStatusFailure {
		msg := resp.GetMessage()
		if msg == "" {
			msg = "the node update failed without a message"
		}
		for _, v := range agentVerdicts {
			if strings.Contains(msg, v.phrase) {
				return Outcome{Kind: OutcomeFailed, Message: msg, Reason: v.reason}
			}
		}
		return Outcome{Kind: OutcomeRetry, RetryAfter: retryAfterFailure, Message: msg, Reason: v1alpha1.ReasonFailed}
	}
	if s := resp.GetRetryAfterSeconds(); s > 0 {
		return Outcome{Kind: OutcomeInProgress, RetryAfter: time.Duration(s) * time.Second, Message: resp.GetMessage()}
	}
	return Outcome{Kind: OutcomeDone, Message: resp.GetMessage()}
}
