package rollout

import (
	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// awaitingApproval is the batch after cur that waits for spec.approvedBatch, if
// one does: cur is done, a batch with a Pending Cluster follows it,
// strategy.approval asks for approval after cur, and approvedBatch has not
// reached that batch. Like a halt it is
// derived on every pass, so raising approvedBatch (or dropping approval) lets the
// rollout go on, and setting the same value twice changes nothing. The first
// batch the rollout starts never waits: creating the rollout approved it.
func awaitingApproval(spec inplacev1.FleetRolloutSpec, entries []*inplacev1.FleetClusterStatus, cur int32) (int32, bool) {
	a := spec.Strategy.Approval
	if a == nil || (a.Mode == inplacev1.FleetApprovalAfterCanaries && cur != 0) || !batchDone(entries, cur) {
		return 0, false
	}
	// The next batch that holds a Cluster to start: one holding only Clusters
	// skipped since it was planned needs no approval, and none would follow.
	next, ok := int32(0), false
	for _, e := range entries {
		if e.State == inplacev1.FleetClusterPending && e.Batch != nil && *e.Batch > cur && (!ok || *e.Batch < next) {
			next, ok = *e.Batch, true
		}
	}
	if !ok {
		return 0, false
	}
	if spec.ApprovedBatch != nil && *spec.ApprovedBatch >= next {
		return 0, false
	}
	return next, true
}
