package singlenode

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func TestClassify(t *testing.T) {
	resp := func(status runtimehooksv1.ResponseStatus, msg string, retry int32) *runtimehooksv1.UpdateMachineResponse {
		r := &runtimehooksv1.UpdateMachineResponse{}
		r.Status, r.Message, r.RetryAfterSeconds = status, msg, retry
		return r
	}
	tests := []struct {
		name string
		resp *runtimehooksv1.UpdateMachineResponse
		want Outcome
	}{
		{"done", resp(runtimehooksv1.ResponseStatusSuccess, "committed", 0), Outcome{Kind: OutcomeDone, Message: "committed"}},
		{"in progress", resp(runtimehooksv1.ResponseStatusSuccess, "step 2/5", 5), Outcome{Kind: OutcomeInProgress, RetryAfter: 5 * time.Second, Message: "step 2/5"}},
		{
			"agent rolled back",
			resp(runtimehooksv1.ResponseStatusFailure, "node n1: the agent rolled back plan 1a2b3c: GateFailed: etcd member unhealthy", 0),
			Outcome{Kind: OutcomeFailed, Message: "node n1: the agent rolled back plan 1a2b3c: GateFailed: etcd member unhealthy", Reason: v1alpha1.ReasonRolledBack},
		},
		{
			"agent failed",
			resp(runtimehooksv1.ResponseStatusFailure, "node n1: the agent failed plan 1a2b3c: rollback incomplete", 0),
			Outcome{Kind: OutcomeFailed, Message: "node n1: the agent failed plan 1a2b3c: rollback incomplete", Reason: v1alpha1.ReasonFailed},
		},
		{
			"API error is retried, never final",
			resp(runtimehooksv1.ResponseStatusFailure, "read Machine ns/m1: connection refused", 0),
			Outcome{Kind: OutcomeRetry, RetryAfter: retryAfterFailure, Message: "read Machine ns/m1: connection refused", Reason: v1alpha1.ReasonFailed},
		},
		{
			"failure without message is retried",
			resp(runtimehooksv1.ResponseStatusFailure, "", 10),
			Outcome{Kind: OutcomeRetry, RetryAfter: retryAfterFailure, Message: "the node update failed without a message", Reason: v1alpha1.ReasonFailed},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(Classify(tt.resp)).To(Equal(tt.want))
		})
	}
}
