// Package machinestate is the one rule for where a Machine stands in an in-place
// update, judged from the management cluster alone (the Machine's spec.version,
// Cluster API's update-in-progress annotation and Updating condition, our
// InPlaceUpdate condition and phase record (protocol.PhaseRecord: staged and
// waiting for a maintenance window), and the node's kubelet version as Cluster
// API copies it into status.nodeInfo). `capi-inplace fleet status` counts Machines by it and the
// FleetRollout controller decides with it whether a Cluster reached its target, so
// that the two never disagree about the same Machine.
//
// Invariants:
//   - Nothing short of the node's own report proves a Machine reached a version: a
//     Machine whose status.nodeInfo carries no kubelet version is Unreported, never
//     UpToDate.
//   - An update Cluster API or capi-inplace has in progress outranks the versions:
//     a Machine that asks for the target and whose kubelet already runs it is still
//     Updating while Cluster API's update-in-progress annotation is on it.
//   - A failure outranks everything: it needs a human, even on a Machine going away.
//   - A worker's update waiting for the control plane (our condition's reason
//     WaitingForControlPlane, while Cluster API updates the Machine) is in
//     progress, never reached, and outranks a staged record: it waits for the
//     control plane, not for a window.
//   - A staged update waiting for its window is in progress, never reached: the
//     node still runs the old version. A Cluster is staged and waiting
//     (StagedAndWaiting) only while nothing else of it is under way.
//
// Pure: no I/O, no clock. Imports: api/v1alpha1, internal/protocol (the one version
// comparison, the coordinator's phase record), Cluster API's core types,
// apimachinery's meta helpers and meta/v1.
package machinestate
