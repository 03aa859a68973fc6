// Package rollout is the pure core of a FleetRollout: given its spec, the status it
// last wrote, the Clusters its selectors choose with what the management cluster
// shows of each, and the time, Step returns the Clusters to start now and the new
// status. Canaries go first, then batches; a batch is done when each of its
// Clusters succeeded, failed or was skipped, and the next starts only if the batch
// met its success threshold (canaries: every one succeeded) and, with
// strategy.approval, once spec.approvedBatch reached it (approval.go); the
// fleet-wide failure budget, a per-cluster timeout with onTimeout Abort, pause and
// abort stop further starts while Clusters already updating go on. Batches take
// strategy.batchSize, or in turn the sizes of strategy.batchSizes (growing
// batches); strategy.maxConcurrent caps the Clusters updating at once across the
// fleet and strategy.spreadBy per value of a Cluster label, whose groups the
// batches are dealt across round-robin (spread.go); the current batch's Pending
// Clusters whose group is full are marked HeldBySpread and counted. The canaries
// are batch 0; Status.Batches counts the batches after them.
//
// Like etcd's raft core it does no I/O and reads no clock. The caller's duties, in
// order, on every pass:
//
//  1. read the FleetRollout and observe every selected Cluster (Observation);
//  2. call Step;
//  3. write the target to each Cluster in Decision.Start, one Cluster at a time;
//  4. pass what each write did to Record (a refused write skips the Cluster, a
//     failed one puts it back to Pending);
//  5. write the status, and call again after Decision.RequeueAfter at the latest.
//
// A crash between 3 and 5 loses nothing: a Cluster whose target is written but
// whose status still says Pending is observed in progress and adopted.
//
// Invariants:
//   - A Cluster is started at most once per rollout: only Pending Clusters start,
//     and no path leads back to Pending but a write that did not happen (Record).
//   - Batches up to Status.CurrentBatch keep their Clusters; later ones are
//     planned afresh on every pass from the Clusters still Pending, so Clusters
//     that join or leave the selection move no started batch.
//   - Halts and waits for approval are derived, never latched: each pass decides
//     them from the spec and the Clusters' states, so raising maxFailures,
//     lowering successThreshold or raising approvedBatch lets the rollout go on,
//     and approving the same batch twice changes nothing. Abort is final (the API
//     refuses undoing it).
//
// Imports: the standard library, api/v1alpha1, apimachinery's meta/v1 and intstr.
package rollout
