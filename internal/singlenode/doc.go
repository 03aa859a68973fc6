// Package singlenode is capi-inplace's own in-place path for KubeadmControlPlanes of one
// or two replicas, which upstream KubeadmControlPlane (KCP) cannot update in place: its
// webhook refuses rollingUpdate.maxSurge 0 below three replicas, and with maxSurge 1 it
// creates a new Machine first.
//
// Opt-in per Cluster or per KCP (annotation inplacev1.SingleNodeControlPlaneAnnotation
// "true"; either counts). The controller copies a Cluster's opt-in onto the KCP once
// (CopyOptIn; Cluster API v1.14.2 can delete a Cluster's annotations), never over a
// value the KCP has (and keeps it there while the KCP is held). Only in a namespace
// enabled for capi-inplace (Enrolled). Without an opt-in nothing here acts, and KCP
// behaves exactly as upstream; while held, a write that removes the last opt-in is
// refused unless it sets allow-replace.
//
// Flow:
//  1. Hold. A mutating admission webhook on KCP UPDATE (DecideHold) adds CAPI's
//     cluster.x-k8s.io/paused and inplacev1.HoldAnnotation (the target hash) in the same
//     write that changes spec.version, spec.kubeadmConfigSpec or the machine template's
//     infrastructureRef, so KCP never observes an outdated spec unpaused and never
//     surges. While held, every later write (the topology controller's server-side
//     apply that omits the annotations, a kubectl edit that deletes them) gets them back,
//     re-derived from the old object. Only a write carrying inplacev1.HoldReleaseAnnotation
//     with the current hold value (the controller's release; optionally also checked
//     against the controller's username) drops the hold, and the webhook never stores
//     that marker.
//  2. Update. The controller (Reconciler) runs KCP's own up-to-date comparison
//     (sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg.UpToDate, which also computes the
//     desired Machine, KubeadmConfig and InfraMachine with desiredstate.ComputeDesired*),
//     dry-runs the alignment, asks the hooks' planner (internal/planner, the same policy
//     and settings, disableInPlaceUpdates included) exactly what KCP's CanUpdateMachine
//     call would ask and refuses what it refuses (ReasonRefused, the hold stays), writes
//     the KCP's ClusterConfiguration into the workload cluster's kubeadm-config as KCP
//     does before a rollout, and drives one node update at a time through the Updater
//     (the coordinator's UpdateNode), deciding on its typed Outcome (Classify).
//  3. Align. On success it server-side applies the InfraMachine, KubeadmConfig and Machine
//     under KCP's field manager, as KCP's triggerInPlaceUpdate would.
//  4. Release. With every Machine up to date it removes the hold and the pause; KCP
//     then finds nothing to roll out and creates nothing.
//  5. Failure. A final failure (the agent rolled the node back, the node is degraded,
//     the plan was never picked up, the API refuses the aligned objects) aligns
//     nothing, sets InPlaceUpdate=False with the cause on the KCP and the Cluster,
//     records Events, records the failure on the Machine (inplacev1.FailedUpdateAnnotation:
//     the KCP's target and the reason; the path's one failure record, the KCP carries
//     none), and keeps KCP paused: releasing it with an outdated Machine would make KCP
//     create a surge Machine. Reverting or changing the spec moves the target and
//     moves on; so does a retry: the Machine's inplacev1.RetryAnnotation, the hook
//     path's retry, makes the controller drop the Machine's record (ActionRetry) and
//     update the node again; the coordinator withdraws the failed plan and its verdict,
//     as for the hooks. A failure past a deadline is asked about again (ActionRecheck):
//     a late commit wins. A KCP that carries a failed target from an earlier version
//     (inplacev1.HoldFailedAnnotation) has it moved onto the Machine first
//     (ActionMigrateFailure).
//  6. Cancel. The Machine's inplacev1.CancelAnnotation, the hook path's cancel, keeps
//     an update from starting (ActionCancel); one in flight goes on to the coordinator,
//     which withdraws it before the agent's first destructive action (StepCancelled)
//     or lets it run on. Either way the KCP stays held and paused with
//     InPlaceUpdate=False, reason Cancelled, and nothing is recorded as failed: removing
//     the annotation lets the update start, reverting the spec releases the hold.
//
// Invariants: all state lives in annotations and conditions of the KCP, the
// Machines' failure records and the objects themselves; every reconcile is
// idempotent and may be repeated after a restart at any point; alignment happens
// only after the node update succeeded and only while KCP is paused, so KCP never
// sees a half-aligned Machine.
//
// Pure parts: TargetHash, DecideHold, Decide, Classify, CopyOptIn, planRequest. Imperative shell: the webhook
// handler, observe, applier, Reconciler.
//
// Imports: api/v1alpha1, internal/planner, internal/extsettings, internal/coordinator (its DesiredNode and
// Outcome types only; the coordinator itself is reached through the Updater
// interface), Cluster API API types and its public KCP packages (controlplane/kubeadm/pkg
// with its Workload, controllers/external, util), controller-runtime, k8s.io/*.
package singlenode
