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
	// OutcomeFailed: the node update failed for this spec (Failure): the agent rolled
	// the node back, or the update cannot proceed at all.
	OutcomeFailed OutcomeKind = "Failed"
)

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
// 0 is done). Upstream retries a Failure forever; the single-node path instead treats
// it as final for the current target, because the coordinator answers Failure only once
// the agent rolled the node back or the update cannot proceed, and repeating it
// would mean another etcd snapshot and another upgrade attempt on the only
// control-plane node without anyone asking.
func Classify(resp *runtimehooksv1.UpdateMachineResponse) Outcome {
	if resp.GetStatus() == runtimehooksv1.ResponseStatusFailure {
		reason := v1alpha1.ReasonFailed
		if strings.Contains(strings.ToLower(resp.GetMessage()), "rolled back") {
			reason = v1alpha1.ReasonRolledBack
		}
		msg := resp.GetMessage()
		if msg == "" {
			msg = "the node update failed without a message"
		}
		return Outcome{Kind: OutcomeFailed, Message: msg, Reason: reason}
	}
	if s := resp.GetRetryAfterSeconds(); s > 0 {
		return Outcome{Kind: OutcomeInProgress, RetryAfter: time.Duration(s) * time.Second, Message: resp.GetMessage()}
	}
	return Outcome{Kind: OutcomeDone, Message: resp.GetMessage()}
}
