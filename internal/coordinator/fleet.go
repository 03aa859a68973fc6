package coordinator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/fleet/ownerread"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Fleet controls (docs/fleet-controls.md): operator requests on the Machine
// (retry, cancel) and on the Cluster (resume), the failure budget, maintenance
// windows and soak. Every decision is made from API state read by this call
// (annotations on the Machine, the Cluster and the Node); the record that must
// outlive a call (failures, last finished node, measured durations) lives in the
// Cluster's FleetStateAnnotation, written with an optimistic lock, so replicas
// and restarts agree. Holds happen before cordon only.

// FleetResolver returns the fleet controls of a Machine's pool (*policy.Policy).
type FleetResolver interface {
	FleetPool(namespace string, machineLabels map[string]string) fleet.Pool
}

var _ FleetResolver = (*policy.Policy)(nil)

// FleetMetrics counts fleet holds; nil counts nothing.
type FleetMetrics interface {
	// Held counts one call that held a node update before cordon, by reason
	// (Paused, Halted, WindowClosed, Soaking, Cancelled, WaitingForControlPlane).
	Held(reason string)
}

// CauseCancelled: an operator cancelled the node update (CancelAnnotation) before
// the agent's first destructive action; the plan was withdrawn.
const CauseCancelled Cause = "Cancelled"

// retryRetried is how soon CAPI calls again after a retry withdrew a failed plan.
const retryRetried = 2

// activeMessage is the Cluster's InPlaceUpdate condition message while no fleet
// control holds a node.
const activeMessage = "in-place updates proceed: no budget, window or soak holds a node"

// fleetCheck runs the fleet controls around Decide's verdict d. held true: the
// call answers out and the update goes no further now.
func (c *Coordinator) fleetCheck(ctx context.Context, s *scope, o Observation, d Decision) (Outcome, bool) {
	if out, held := c.resume(ctx, s); held {
		return out, true
	}
	ann := s.stored.GetAnnotations()
	if _, ok := ann[inplacev1.RetryAnnotation]; ok {
		if out, held := c.retry(ctx, s, d); held {
			return out, true
		}
	}
	if _, ok := ann[inplacev1.CancelAnnotation]; ok {
		if out, held := c.cancel(ctx, s, o, d); held {
			return out, true
		}
	}
	switch d.Action {
	case ActFail, ActDegraded, ActAbandon:
		c.recordFailure(ctx, s, d)
	case ActSucceed:
		if o.Started {
			if err := c.recordFinished(ctx, s, o); err != nil {
				return c.fleetWriteFailure(s, err), true
			}
		}
	case ActWait:
		if o.Paused && !o.Started && d.RetryAfterSeconds == retryPaused {
			c.setFleetCondition(ctx, s, inplacev1.ReasonPaused, inplacev1.EventUpdatesPaused, d.Message)
			c.countHold("Paused")
		}
	case ActStart:
		if !o.Started {
			return c.gateStart(ctx, s, o)
		}
	}
	return Outcome{}, false
}

// gateStart holds an update that has not started (nothing cordoned yet) while its
// pool's budget is spent, its window is closed or the previous node soaks, then a
// worker's that raises its kubelet's version while the control plane is not at it
// (holdForControlPlane). An update held by a closed window or by the control
// plane stages its plan meanwhile (stageAhead).
func (c *Coordinator) gateStart(ctx context.Context, s *scope, o Observation) (Outcome, bool) {
	pool := c.fleetPool(s)
	st, stErr := fleet.Decode(s.cluster.Annotations[inplacev1.FleetStateAnnotation])
	if stErr != nil {
		// A corrupt record cannot say whether the budget is spent: hold, visibly.
		msg := fmt.Sprintf("halted: the Cluster's %s annotation is invalid (%v); node %s not started (remove the annotation to reset the fleet record)",
			inplacev1.FleetStateAnnotation, stErr, s.node.Name)
		c.setFleetCondition(ctx, s, inplacev1.ReasonHalted, inplacev1.EventUpdatesHalted, msg)
		return inProgress(60, msg), true
	}
	others := st.Failures[:0:0]
	for _, f := range st.Failures {
		if f.Machine != s.stored.Name { // a node's own failure is the operator's to retry
			others = append(others, f)
		}
	}
	counted, err := c.countedFailures(ctx, s, others, pool.Name)
	if err != nil {
		return retryable(CauseManagementAPI, stepMsg(stepAgent, "read the owners of failed Machines: %v", err)), true
	}
	in := fleet.GateInput{
		Node: s.node.Name, Now: c.opts.Now(),
		Budget: pool.Budget, Counted: counted,
		Expected: st.ExpectedDuration(pool.ExpectedDuration),
		Soak:     pool.Soak,
	}
	in.Windows, _, in.WindowsErr = clusterWindows(pool, s.cluster)
	if last, ok := st.LastFinished[pool.Name]; ok && pool.Soak > 0 {
		in.Last = &last
		in.LastHealthy = c.nodeReady(ctx, s, last.Node)
	}
	hold := fleet.Gate(in)
	reason, event := inplacev1.ReasonActive, inplacev1.EventUpdatesActive
	switch hold.Reason {
	case fleet.HoldHalted:
		reason, event = inplacev1.ReasonHalted, inplacev1.EventUpdatesHalted
	case fleet.HoldWindowClosed:
		reason, event = inplacev1.ReasonWindowClosed, inplacev1.EventWindowClosed
	case fleet.HoldSoaking:
		reason, event = inplacev1.ReasonSoaking, inplacev1.EventSoaking
	}
	if hold.Reason == fleet.HoldNone {
		// The same message for every node, so that the condition is written once
		// when updates become active, not once per node: ten nodes starting together
		// would otherwise race on the Cluster's status (and wake Cluster API's
		// Cluster controllers) for a message that names whichever node won.
		c.setFleetCondition(ctx, s, reason, event, activeMessage)
		return c.holdForControlPlane(ctx, s, o, pool)
	}
	c.setFleetCondition(ctx, s, reason, event, hold.Message)
	c.countHold(string(hold.Reason))
	if hold.Reason == fleet.HoldWindowClosed {
		return c.stageAhead(ctx, s, pool, hold), true
	}
	return inProgress(int32(hold.RetryAfter/time.Second), stepMsg(stepAgent, "%s", hold.Message)), true
}

func (c *Coordinator) fleetPool(s *scope) fleet.Pool {
	if c.opts.Fleet == nil {
		return fleet.DefaultPool()
	}
	return c.opts.Fleet.FleetPool(s.stored.Namespace, s.stored.Labels)
}

func (c *Coordinator) countHold(reason string) {
	if c.opts.FleetMetrics != nil {
		c.opts.FleetMetrics.Held(reason)
	}
}

// nodeReady reports whether a node of the workload cluster is Ready; a node that
// is gone cannot be waited for and counts as healthy.
func (c *Coordinator) nodeReady(ctx context.Context, s *scope, name string) bool {
	n := &corev1.Node{}
	if err := s.wc.Client.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
		return apierrors.IsNotFound(err)
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// resume clears the failure record when the Cluster carries ResumeAnnotation,
// removing the annotation in the same write.
func (c *Coordinator) resume(ctx context.Context, s *scope) (Outcome, bool) {
	if _, ok := s.cluster.Annotations[inplacev1.ResumeAnnotation]; !ok {
		return Outcome{}, false
	}
	err := c.patchClusterState(ctx, s, func(st *fleet.State, ann map[string]string) {
		st.Resume()
		delete(ann, inplacev1.ResumeAnnotation)
	})
	if err != nil {
		return c.fleetWriteFailure(s, err), true
	}
	c.opts.Recorder.Eventf(s.cluster, nil, corev1.EventTypeNormal, inplacev1.EventUpdatesResumed, "Resume",
		"resumed in-place updates: the failures and measured durations were cleared (annotation %s)", inplacev1.ResumeAnnotation)
	return Outcome{}, false
}

// retryable failures an operator may retry.
func retriable(d Decision) bool {
	switch d.Action {
	case ActFail, ActDegraded, ActAbandon:
		return true
	case ActReportFailure:
		return d.Cause == CauseInvalidStatus
	}
	return false
}

// retry withdraws a failed plan and the agent's verdict on it (the agent forgets
// a withdrawn failed plan), drops the Machine from the failure record, then
// removes RetryAnnotation: each step repeats harmlessly if the call dies.
func (c *Coordinator) retry(ctx context.Context, s *scope, d Decision) (Outcome, bool) {
	if !retriable(d) {
		if err := c.removeMachineAnnotation(ctx, s, inplacev1.RetryAnnotation); err != nil {
			return retryable(CauseManagementAPI, err.Error()), true
		}
		c.opts.Recorder.Eventf(s.stored, nil, corev1.EventTypeNormal, inplacev1.EventNothingToRetry, "Retry",
			"node %s has no failed update to retry; annotation %s removed", s.node.Name, inplacev1.RetryAnnotation)
		return Outcome{}, false
	}
	err := c.patchNode(ctx, s, "clear the failed plan of", func(_ *corev1.Node, ann map[string]string) {
		delete(ann, inplacev1.DesiredPlanAnnotation)
		delete(ann, inplacev1.PlanPublishedAnnotation)
		delete(ann, inplacev1.StatusAnnotation)
		delete(ann, inplacev1.StateAnnotation)
		delete(ann, inplacev1.PlanNotPickedUpAnnotation)
		delete(ann, inplacev1.DeadlineExceededAnnotation)
		// A failed staging is staged again, from the start.
		delete(ann, inplacev1.StagingStatusAnnotation)
		delete(ann, inplacev1.StagePlanAnnotation)
		delete(ann, inplacev1.StageTimeoutAnnotation)
	})
	if err != nil {
		return c.workloadFailure(s, stepPublish, err), true
	}
	if err := c.patchClusterState(ctx, s, func(st *fleet.State, _ map[string]string) { st.Forget(s.stored.Name) }); err != nil {
		return c.fleetWriteFailure(s, err), true
	}
	// The update's clock restarts with the retry (watchdog.go), and the next call
	// builds the plan again rather than keeping the one withdrawn here
	// (RetriedPlanAnnotation): one write, so the retry is seen done only with both.
	err = c.patchMachineAnnotations(ctx, s.stored, "retry the update of", func(ann map[string]string) bool {
		delete(ann, inplacev1.RetryAnnotation)
		delete(ann, inplacev1.UpdatePhaseAnnotation)
		// The plan the node holds, not this call's build: that is the one the
		// next call must stop keeping. With none held, nothing is kept anyway.
		delete(ann, inplacev1.RetriedPlanAnnotation)
		if s.published != "" {
			ann[inplacev1.RetriedPlanAnnotation] = s.published
		}
		return true
	})
	if err != nil {
		return retryable(CauseManagementAPI, err.Error()), true
	}
	msg := fmt.Sprintf("retrying node %s: the failed plan %s was withdrawn and its verdict cleared (%s)", s.node.Name, short(s.planHash), d.Message)
	c.opts.Recorder.Eventf(s.stored, nil, corev1.EventTypeNormal, inplacev1.EventRetryRequested, "Retry", "%s", msg)
	return inProgress(retryRetried, stepMsg(stepAgent, "%s", msg)), true
}

// cancel stops an update the agent has not begun changing the node for: no status
// for the plan, or Pending. Later, the update runs on (the agent cannot be
// stopped mid-plan safely) and cancel does nothing.
func (c *Coordinator) cancel(ctx context.Context, s *scope, o Observation, d Decision) (Outcome, bool) {
	switch d.Action {
	case ActSucceed, ActFail, ActDegraded, ActAbandon, ActReportFailure:
		return Outcome{}, false // over already
	}
	if st := o.Status; st != nil && !st.Phase.Terminal() && st.Phase != protocol.PhasePending {
		// The agent is at work (on this plan or an older one): it cannot be stopped
		// mid-plan safely, and uncordoning now would put a changing node in service.
		ctrl.LoggerFrom(ctx).Info("Cancel came too late: the agent is at work", "phase", st.Phase)
		s.cancelTooLate = st.Phase
		return Outcome{}, false
	}
	// Precondition on the Node as read, as for a withdrawal at the pick-up deadline
	// (abandon): the agent claims a plan with the same one (agent/claim.go), so a
	// cancel and a pick-up never both land. The loser sees a Conflict; the next call
	// reads the agent's claim and lets the update run on.
	err := c.patchNodeAs(ctx, s, "cancel the update of", true, func(n *corev1.Node, ann map[string]string) {
		if ann[inplacev1.DesiredPlanAnnotation] == s.planHash {
			delete(ann, inplacev1.DesiredPlanAnnotation)
		}
		if _, ok := ann[inplacev1.CordonedByAnnotation]; ok {
			n.Spec.Unschedulable = false
			delete(ann, inplacev1.CordonedByAnnotation)
		}
		delete(ann, inplacev1.UpdateStartedAnnotation)
		delete(ann, inplacev1.PlanPublishedAnnotation)
	})
	if err != nil {
		return c.workloadFailure(s, stepApply, err), true // a Conflict: in progress, the next call decides again
	}
	if out, ok := c.liftRemediationHold(ctx, s); !ok {
		return out, true
	}
	msg := fmt.Sprintf("node %s: update cancelled by annotation %s before the agent changed anything; the plan was withdrawn and the node is in service (remove the annotation to update it)",
		s.node.Name, inplacev1.CancelAnnotation)
	cond := metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: inplacev1.ReasonCancelled, Message: msg}
	changed, err := c.setMachineCondition(ctx, s.stored, cond)
	if err != nil {
		return retryable(CauseManagementAPI, err.Error()), true
	}
	if changed {
		c.opts.Recorder.Eventf(s.stored, nil, corev1.EventTypeNormal, inplacev1.EventUpdateCancelled, "Cancel", "%s", msg)
		c.countHold("Cancelled")
	}
	return final(CauseCancelled, msg), true
}

// cancelTooLateNote ends an answer in progress whose Machine asks for a cancel
// that came after the agent began (phase): the operator learns that it was seen
// and why the update runs on.
func cancelTooLateNote(phase protocol.Phase) string {
	return fmt.Sprintf("; cancel by annotation %s came too late: the agent is at work on the node (%s) and cannot be stopped safely, so the update runs on",
		inplacev1.CancelAnnotation, phase)
}

// recordFailure counts a failed node update against its pool's budget. A failed
// write is retried by the next call (CAPI calls again after Failure).
func (c *Coordinator) recordFailure(ctx context.Context, s *scope, d Decision) {
	if st, err := fleet.Decode(s.cluster.Annotations[inplacev1.FleetStateAnnotation]); err == nil {
		for _, f := range st.Failures {
			if f.Machine == s.stored.Name && f.Plan == s.planHash {
				return // recorded by an earlier call
			}
		}
	}
	pool := c.fleetPool(s)
	owner, err := c.ownerOf(ctx, s.cluster, s.stored)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not read the Machine's owner; the next call retries", "error", err.Error())
		return
	}
	f := fleet.Failure{Machine: s.stored.Name, Node: s.node.Name, Pool: pool.Name, Owner: owner.name, Spec: owner.spec,
		Plan: s.planHash, Cause: failureCause(s, d), At: c.opts.Now().UTC().Truncate(time.Second)}
	added := false
	err = c.patchClusterState(ctx, s, func(st *fleet.State, _ map[string]string) { added = st.RecordFailure(f) })
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not record the failure on the Cluster; the next call retries", "error", err.Error())
		return
	}
	if added {
		c.opts.Recorder.Eventf(s.cluster, nil, corev1.EventTypeWarning, inplacev1.EventFailureCounted, "FailureBudget",
			"node %s failed (%s): counted against the failure budget of pool %q", s.node.Name, f.Cause, pool.Name)
	}
}

// failureCause is the short cause of the record: the agent's reason, else the
// typed cause.
func failureCause(s *scope, d Decision) string {
	if st, err := protocol.DecodeStatus(s.node.Annotations[inplacev1.StatusAnnotation]); err == nil && st.PlanHash == s.planHash && st.Reason != "" {
		return string(d.Cause) + ": " + st.Reason
	}
	return string(d.Cause)
}

// recordFinished notes the pool's last finished node and the update's duration,
// before finish clears the start marker the duration is measured from.
//
// Only the fleet gate reads them: the durations for maintenance windows, the last
// finished node for the soak. A pool with neither (no windows in the policy or on
// the Cluster, no soak) skips the write: it is one write of the Cluster per node,
// which the maxUnavailable nodes of a pool make at once (the bench's 3 + 30 rollout).
// Windows added later start from the pool's conservative expected duration.
func (c *Coordinator) recordFinished(ctx context.Context, s *scope, o Observation) error {
	pool := c.fleetPool(s)
	if !recordsFinished(pool, s.cluster) {
		return nil
	}
	now := c.opts.Now()
	return c.patchClusterState(ctx, s, func(st *fleet.State, _ map[string]string) {
		st.RecordFinished(pool.Name, s.node.Name, s.planHash, now.Truncate(time.Second), o.Elapsed)
	})
}

// recordsFinished reports whether the fleet gate of pool reads finished nodes:
// it has a soak, or maintenance windows (the policy's or the Cluster's annotation).
func recordsFinished(pool fleet.Pool, cluster *clusterv1.Cluster) bool {
	windows, fromAnnotation, _ := clusterWindows(pool, cluster)
	return pool.Soak > 0 || len(windows) > 0 || fromAnnotation
}

// clusterWindows is fleet.PoolWindows for pool in cluster.
func clusterWindows(pool fleet.Pool, cluster *clusterv1.Cluster) (fleet.Schedule, bool, error) {
	v, annotated := cluster.Annotations[inplacev1.MaintenanceWindowsAnnotation]
	return fleet.PoolWindows(pool.Windows, v, annotated)
}

// patchClusterState applies mutate to the Cluster's fleet record (and its
// annotations) and writes it when anything changed, with an optimistic lock: two
// calls never lose each other's entries. A corrupt record is replaced.
//
// Every node update of a cluster writes this one object (a finished node's
// duration, a failure), so concurrent calls for the nodes of a pool conflict here
// as a matter of course: a conflict re-reads the Cluster and applies mutate again
// within the call (fleetRecordBackoff) instead of answering "in progress" and
// costing the node a whole retry interval. mutate must therefore be a pure
// function of the record it is given.
func (c *Coordinator) patchClusterState(ctx context.Context, s *scope, mutate func(*fleet.State, map[string]string)) error {
	first := true
	return retry.RetryOnConflict(fleetRecordBackoff, func() error {
		if !first {
			fresh := &clusterv1.Cluster{}
			if err := c.opts.Client.Get(ctx, s.clusterKey, fresh); err != nil {
				return fmt.Errorf("read Cluster %s to write its fleet record again: %w", s.clusterKey, err)
			}
			*s.cluster = *fresh
		}
		first = false
		return c.patchClusterStateOnce(ctx, s, mutate)
	})
}

// fleetRecordBackoff bounds the in-call retries of a conflicting fleet record
// write: up to 6 attempts within about a third of a second, enough for the
// maxUnavailable nodes of a pool finishing at once; beyond it the call answers
// "in progress" and CAPI calls again.
var fleetRecordBackoff = wait.Backoff{Steps: 6, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5}

func (c *Coordinator) patchClusterStateOnce(ctx context.Context, s *scope, mutate func(*fleet.State, map[string]string)) error {
	before := s.cluster.DeepCopy()
	ann := s.cluster.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	st, _ := fleet.Decode(ann[inplacev1.FleetStateAnnotation])
	mutate(&st, ann)
	if enc := st.Encode(); enc == "" {
		delete(ann, inplacev1.FleetStateAnnotation)
	} else {
		ann[inplacev1.FleetStateAnnotation] = enc
	}
	s.cluster.SetAnnotations(ann)
	if fmt.Sprint(before.Annotations) == fmt.Sprint(s.cluster.Annotations) {
		return nil
	}
	if err := c.opts.Client.Patch(ctx, s.cluster, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		*s.cluster = *before
		return fmt.Errorf("write the fleet record of Cluster %s: %w", s.clusterKey, err)
	}
	return nil
}

func (c *Coordinator) fleetWriteFailure(s *scope, err error) Outcome {
	if apierrors.IsConflict(err) {
		return inProgress(retryDrain, stepMsg(stepAgent, "retrying after a concurrent change: %v", err))
	}
	return retryable(CauseManagementAPI, stepMsg(stepAgent, "%v", err))
}

// removeMachineAnnotation removes the annotations keys from the Machine, in one
// write; the first names the request in errors.
func (c *Coordinator) removeMachineAnnotation(ctx context.Context, s *scope, keys ...string) error {
	before := s.stored.DeepCopy()
	for _, key := range keys {
		delete(s.stored.Annotations, key)
	}
	if len(before.Annotations) == len(s.stored.Annotations) {
		return nil
	}
	if err := c.opts.Client.Patch(ctx, s.stored, client.MergeFrom(before)); err != nil {
		*s.stored = *before
		return fmt.Errorf("remove annotation %s from Machine %s: %w", keys[0], s.stored.Name, err)
	}
	return nil
}

// setFleetCondition writes the Cluster's InPlaceUpdate condition, its message
// redacted as setMachineCondition's, recording an Event when its reason changes (a
// transition). Failures are logged: the next call writes it again.
func (c *Coordinator) setFleetCondition(ctx context.Context, s *scope, reason, event, msg string) {
	msg = protocol.RedactKnownSecrets(msg)
	status := metav1.ConditionTrue
	if reason != inplacev1.ReasonActive {
		status = metav1.ConditionFalse
	}
	cur := meta.FindStatusCondition(s.cluster.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == msg {
		return
	}
	// A transition is a change of reason; the first update of a cluster starting
	// unheld is not one (no Event for every cluster's first node).
	transition := (cur == nil && reason != inplacev1.ReasonActive) || (cur != nil && cur.Reason != reason)
	orig := s.cluster.DeepCopy()
	meta.SetStatusCondition(&s.cluster.Status.Conditions, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition,
		Status: status, Reason: reason, Message: msg, ObservedGeneration: s.cluster.Generation})
	if err := c.opts.Client.Status().Patch(ctx, s.cluster, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*s.cluster = *orig
		ctrl.LoggerFrom(ctx).Info("Could not set the Cluster's condition; the next call retries", "error", err.Error())
		return
	}
	if transition {
		eventType := corev1.EventTypeNormal
		if reason == inplacev1.ReasonHalted {
			eventType = corev1.EventTypeWarning
		}
		c.opts.Recorder.Eventf(s.cluster, nil, eventType, event, "FleetControls", "%s", msg)
	}
}

// owner is a Machine's owner and the key of its desired spec.
type owner struct{ name, spec string }

// ownerOf finds the MachineDeployment or control plane whose spec the Machine
// follows (fleet.OwnerOf, by CAPI's labels) and keys that spec; a Machine without
// either has no owner (its failures reset only on resume).
func (c *Coordinator) ownerOf(ctx context.Context, cluster *clusterv1.Cluster, m *clusterv1.Machine) (owner, error) {
	var cpKind, cpName string
	if cluster.Spec.ControlPlaneRef.IsDefined() {
		cpKind, cpName = cluster.Spec.ControlPlaneRef.Kind, cluster.Spec.ControlPlaneRef.Name
	}
	name := fleet.OwnerOf(m.Labels[clusterv1.MachineDeploymentNameLabel], m.Labels[clusterv1.MachineControlPlaneNameLabel], cpKind, cpName)
	if name == "" {
		return owner{}, nil
	}
	spec, ok, err := c.ownerSpec(ctx, cluster, name)
	if err != nil || !ok {
		return owner{name: name}, err
	}
	return owner{name: name, spec: spec}, nil
}

// ownerSpec reads an owner "Kind/name" of the Cluster and keys its desired spec
// (ownerread.SpecKey, which internal/status's Gather uses too). ok false: the
// owner is gone.
func (c *Coordinator) ownerSpec(ctx context.Context, cluster *clusterv1.Cluster, name string) (string, bool, error) {
	return ownerread.SpecKey(ctx, c.opts.Client, c.opts.Client.RESTMapper(), cluster, name)
}

// countedFailures keeps the failures of pool that count against its budget
// (fleet.Counted), reading the owners they name.
func (c *Coordinator) countedFailures(ctx context.Context, s *scope, failures []fleet.Failure, pool string) ([]fleet.Failure, error) {
	var inPool []fleet.Failure
	for _, f := range failures {
		if f.Pool == pool {
			inPool = append(inPool, f)
		}
	}
	specs := map[string]string{}
	for _, o := range fleet.Owners(inPool) {
		spec, ok, err := c.ownerSpec(ctx, s.cluster, o)
		if err != nil {
			return nil, err
		}
		if ok {
			specs[o] = spec
		}
	}
	return fleet.Counted(inPool, pool, func(o string) (string, bool) { v, ok := specs[o]; return v, ok }), nil
}
