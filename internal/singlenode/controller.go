package singlenode

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Updater drives one node update: the coordinator's in-process entry
// (coordinator.Coordinator.UpdateNode), the same node update upstream's Machine
// controller reaches through the UpdateMachine hook. It must be idempotent: the
// controller calls it again with the same desired objects until it answers done or a
// final failure, also after either side restarted. The controller decides on the
// typed Outcome (Kind, Cause), never on its Message.
type Updater interface {
	UpdateNode(ctx context.Context, d coordinator.DesiredNode) coordinator.Outcome
}

// EventRecorder is the part of k8s.io/client-go/tools/events.EventRecorder we use.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Event reasons on the KubeadmControlPlane, besides the inplacev1.Event* ones.
const (
	eventHoldReleased = "InPlaceHoldReleased"
	eventAlignFailed  = "InPlaceAlignFailed"
	// eventNamespaceNotEnabled: a held KubeadmControlPlane in a namespace that did not
	// opt in to capi-inplace, which the controller leaves alone.
	eventNamespaceNotEnabled = "InPlaceNamespaceNotEnabled"
)

// Timing of the controller's own polling; the coordinator's retryAfterSeconds wins while
// a node update is in flight.
const (
	waitRequeue    = 15 * time.Second
	updaterTimeout = 30 * time.Second
	// recheckRequeue paces the questions about an update that passed a deadline.
	recheckRequeue = 30 * time.Second
)

// Reconciler drives held KubeadmControlPlanes: node updates through the Updater,
// alignment of the Machine, KubeadmConfig and InfraMachine, release. All its state is
// in the KCP's annotations and conditions and the Machines' failure records; every
// step is idempotent.
type Reconciler struct {
	// Client reads without a cache (decisions must not act on stale Machines) and
	// writes; its user is the one the hold webhook lets release.
	Client   client.Client
	Updater  Updater
	Recorder EventRecorder
	// Planner is the one the CanUpdate hooks ask: what it refuses is refused here too.
	Planner *planner.Planner
	// Settings are the planner's settings, as the ExtensionConfig's spec.settings are
	// for the hooks (disableInPlaceUpdates).
	Settings map[string]string
	// ExtensionConfigName names the ExtensionConfig registering the hooks; its
	// spec.settings overlay Settings (empty: Settings only).
	ExtensionConfigName string
	// Workloads reaches the workload cluster, whose kubeadm-config ConfigMap is
	// updated before each node update.
	Workloads WorkloadClients
	// Now is the clock (rollout.before/after evaluation); time.Now when nil.
	Now func() time.Time
	// RecheckAfter paces ActionRecheck; recheckRequeue when zero.
	RecheckAfter time.Duration
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := r.Client.Get(ctx, req.NamespacedName, kcp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ns, err := readNamespace(ctx, r.Client, kcp.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !NamespaceEnabled(ns) {
		// Not enrolled (Enrolled): no copy, no update, no release; a hold here was
		// written by hand (the hold webhook's namespaceSelector keeps it away).
		if IsHeld(kcp) && r.Recorder != nil {
			r.Recorder.Eventf(kcp, nil, corev1.EventTypeWarning, eventNamespaceNotEnabled, "Hold",
				"namespace %s is not labelled %s=true, so capi-inplace does not act on this hold; label the namespace, or remove annotations %s and %s to hand the KubeadmControlPlane back",
				kcp.Namespace, inplacev1.NamespaceEnabledLabel, inplacev1.HoldAnnotation, clusterv1.PausedAnnotation)
		}
		return ctrl.Result{}, nil
	}
	if !IsHeld(kcp) {
		// The first sight of a Cluster's opt-in is copied onto the KCP, before any
		// hold: the hold webhook then finds it there even if the Cluster lost it.
		return ctrl.Result{}, r.copyOptIn(ctx, kcp, nil)
	}
	log := ctrl.LoggerFrom(ctx).WithValues("KubeadmControlPlane", klog.KObj(kcp))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster := &clusterv1.Cluster{}
	name := ClusterNameOf(kcp)
	if name == "" {
		return ctrl.Result{RequeueAfter: waitRequeue}, nil
	}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kcp.Namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			// A Cluster that is gone opted out of everything.
			cluster = nil
		} else {
			return ctrl.Result{}, fmt.Errorf("read Cluster %s: %w", name, err)
		}
	}
	if cluster == nil {
		cluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: kcp.Namespace, Name: name}}
	}
	if err := r.copyOptIn(ctx, kcp, cluster); err != nil {
		return ctrl.Result{}, err
	}

	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	obs, err := observe(ctx, r.Client, kcp, cluster, now())
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.namespace = ns
	d := Decide(obs.state())
	log.V(1).Info("Single-node control-plane decision", "action", d.Action, "Machine", d.Machine, "message", d.Message)

	switch d.Action {
	case ActionRelease:
		return ctrl.Result{}, r.release(ctx, obs, d)
	case ActionKeepFailed:
		// The failure condition was written when the update failed; nothing to redo.
		return ctrl.Result{}, nil
	case ActionRetry:
		return r.retry(ctx, obs, d)
	case ActionMigrateFailure:
		return r.migrateLegacyFailure(ctx, obs, d)
	case ActionCancel:
		return ctrl.Result{}, r.cancel(ctx, obs, d.Machine, d.Message, false)
	case ActionWait:
		return ctrl.Result{RequeueAfter: waitRequeue}, r.setCondition(ctx, obs, metav1.ConditionFalse, inplacev1.ReasonWaiting, d.Message)
	case ActionUpdate:
		return r.update(ctx, obs, d.Machine, false)
	case ActionRecheck:
		return r.update(ctx, obs, d.Machine, true)
	}
	return ctrl.Result{}, nil
}

// update drives the node update of one Machine one step and aligns it once done.
// recheck: the update failed on a deadline (ActionRecheck); only its end as done
// changes anything, and the same failure again is not recorded again.
func (r *Reconciler) update(ctx context.Context, obs *observed, machineName string, recheck bool) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", klog.KRef(obs.kcp.Namespace, machineName))
	machine := obs.machine(machineName)
	objs, err := desiredFrom(obs.results[machineName])
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("desired objects of Machine %s: %w", machineName, err)
	}
	a := applier{c: r.Client}

	// A server dry run of the alignment first: the provider's and CAPI's webhooks judge
	// the new objects before the node is touched, so an alignment the API would refuse
	// stops here instead of after a node update that could then never be recorded.
	aligned, err := a.apply(ctx, objs, true)
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return r.fail(ctx, obs, machine, inplacev1.ReasonFailed,
				fmt.Sprintf("the API refuses the aligned objects, so the node was not touched: %v", err))
		}
		return ctrl.Result{}, fmt.Errorf("dry-run alignment of Machine %s: %w", machineName, err)
	}

	// The dry-run result must be what KCP calls up to date; otherwise (fields of the old
	// spec owned by another field manager, which an apply cannot remove) aligning after
	// the node update would leave the Machine outdated and KCP would replace it. Stop
	// before touching the node.
	if ok, why, err := alignedUpToDate(ctx, r.Client, obs, machine, aligned); err != nil {
		return ctrl.Result{}, err
	} else if !ok {
		return r.fail(ctx, obs, machine, inplacev1.ReasonFailed,
			fmt.Sprintf("the aligned objects would still be outdated for KubeadmControlPlane, so the node was not touched: %s", strings.Join(why, "; ")))
	}

	// The same planner as the hooks: a change it cannot apply in place (or in-place
	// updates disabled) is refused before anything is touched, and the hold stays,
	// because releasing KCP would make it replace the Machine.
	if refused, err := r.refusals(ctx, machine, obs.results[machineName], aligned); err != nil {
		return ctrl.Result{}, err
	} else if len(refused) > 0 {
		return r.refuse(ctx, obs, machine, refusalMessage(refused))
	}

	if obs.kcp.Annotations[inplacev1.HoldUpdatingAnnotation] != machineName && !recheck {
		if err := r.patchKCPAnnotations(ctx, obs.kcp, map[string]*string{inplacev1.HoldUpdatingAnnotation: &machineName}); err != nil {
			return ctrl.Result{}, err
		}
	}

	// What KCP would do before any rollout: the workload cluster's kubeadm-config
	// ConfigMap carries the new ClusterConfiguration, which kubeadm upgrade renders
	// into the static pod manifests.
	if err := r.updateWorkloadKubeadmConfig(ctx, obs); err != nil {
		return ctrl.Result{}, err
	}

	node, err := desiredNode(aligned)
	if err != nil {
		return ctrl.Result{}, err
	}
	callCtx, cancel := context.WithTimeout(ctx, updaterTimeout)
	out := Classify(r.Updater.UpdateNode(callCtx, node))
	cancel()
	log.V(1).Info("Node update answered", "step", out.Step, "retryAfter", out.RetryAfter, "reason", out.Reason, "message", out.Message)

	if recheck && out.Step != StepDone {
		if out.Step == StepFail && out.Reason != inplacev1.ReasonDeadlineExceeded {
			// The agent's verdict came after the deadline: a failure for good.
			return r.fail(ctx, obs, machine, out.Reason, out.Message)
		}
		return ctrl.Result{RequeueAfter: r.recheckAfter()}, nil
	}
	switch out.Step {
	case StepWait:
		msg := fmt.Sprintf("Machine %s: %s", machineName, out.Message)
		return ctrl.Result{RequeueAfter: out.RetryAfter}, r.setCondition(ctx, obs, metav1.ConditionFalse, out.Reason, msg)
	case StepFail:
		return r.fail(ctx, obs, machine, out.Reason, out.Message)
	case StepCancelled:
		return ctrl.Result{}, r.cancel(ctx, obs, machineName, fmt.Sprintf("Machine %s: %s", machineName, out.Message), true)
	}

	// Done: align the three objects (repeatable from the start), then clear the marker.
	if _, err := a.apply(ctx, objs, false); err != nil {
		r.Recorder.Eventf(obs.kcp, machine, corev1.EventTypeWarning, eventAlignFailed, "Align", "%s",
			eventNote(fmt.Sprintf("Machine %s was updated in place but its objects could not be aligned yet (will retry; KCP stays held): %v", machineName, err)))
		return ctrl.Result{}, fmt.Errorf("align Machine %s: %w", machineName, err)
	}
	// A commit after a deadline ends the failure recorded for it. Once aligned, the
	// Machine is up to date and a record left by a crash here counts for nothing.
	if err := r.forgetFailures(ctx, machine); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.endUpdating(ctx, obs.kcp); err != nil {
		return ctrl.Result{}, err
	}
	log.Info("Control-plane Machine updated in place and aligned")
	r.Recorder.Eventf(machine, obs.kcp, corev1.EventTypeNormal, inplacev1.EventUpdateSucceeded, "Update",
		"Updated in place to %s and aligned with KubeadmControlPlane %s", obs.kcp.Spec.Version, obs.kcp.Name)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// fail records a failed node update: the condition and Events carry the cause, the
// Machine's failure record (FailedUpdateAnnotation) marks its update to the current
// target failed so it is not retried, and the in-flight marker goes. Nothing is
// aligned: the Machine, KubeadmConfig and InfraMachine keep the spec the node still
// runs. The hold stays, because releasing KCP with an outdated Machine would make it
// create a surge Machine.
//
// The order makes each write safe to repeat after a crash: until the record is
// written the in-flight marker (or nothing) leads the next reconcile to ask again,
// and the coordinator answers a failed update the same until a retry or a new spec
// (a failure found before it is asked is found again); the condition goes first, so
// a record never stands beside a condition that does not say why. Events go out with
// the condition's change only, so asking again records nothing twice.
func (r *Reconciler) fail(ctx context.Context, obs *observed, machine *clusterv1.Machine, reason, cause string) (ctrl.Result, error) {
	msg := fmt.Sprintf("Machine %s was not updated: %s. KubeadmControlPlane %s stays paused at its new spec (no Machine is created); revert or change the spec, or retry: annotate Machine %s with %s",
		machine.Name, cause, obs.kcp.Name, machine.Name, inplacev1.RetryAnnotation)
	changed, err := r.writeCondition(ctx, obs, metav1.ConditionFalse, reason, msg)
	if changed {
		ctrl.LoggerFrom(ctx).Info("In-place update of a control-plane Machine failed", "Machine", klog.KObj(machine), "reason", reason, "cause", cause)
		r.Recorder.Eventf(obs.kcp, machine, corev1.EventTypeWarning, eventFor(reason), "Update", "%s", eventNote(msg))
		r.Recorder.Eventf(machine, obs.kcp, corev1.EventTypeWarning, eventFor(reason), "Update", "%s", eventNote(cause))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.recordFailure(ctx, obs, machine, reason); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.endUpdating(ctx, obs.kcp); err != nil {
		return ctrl.Result{}, err
	}
	if reason == inplacev1.ReasonDeadlineExceeded {
		// Decide asks about it again (ActionRecheck); the Machine watch does not wake
		// the controller for its own record.
		return ctrl.Result{RequeueAfter: r.recheckAfter()}, nil
	}
	return ctrl.Result{}, nil
}

// cancel records an update the operator cancelled with the Machine's cancel
// annotation: before it started (ActionCancel), or in flight and withdrawn by the
// coordinator before the agent's first destructive action (withdrawn, the
// coordinator's StepCancelled, whose detail says so). The hold and the pause stay:
// releasing KCP with an outdated Machine would make it replace the only control
// plane. Unlike fail, no failure record is written and nothing counts as a failure:
// the in-flight marker goes, and once the annotation is gone the next reconcile
// updates the Machine to the KCP's spec of that time. The condition and the Event
// are written when the update becomes cancelled; a cancel already recorded keeps
// its message (the coordinator's detail of a withdrawal).
func (r *Reconciler) cancel(ctx context.Context, obs *observed, machineName, detail string, withdrawn bool) error {
	if err := r.endUpdating(ctx, obs.kcp); err != nil {
		return err
	}
	cur := meta.FindStatusCondition(obs.kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	recorded := cur != nil && cur.Reason == inplacev1.ReasonCancelled
	if recorded && !withdrawn {
		return nil
	}
	msg := fmt.Sprintf("%s. KubeadmControlPlane %s stays paused at its new spec (no Machine is created); remove the annotation from Machine %s to update it, or revert the spec to release the hold",
		detail, obs.kcp.Name, machineName)
	if err := r.setCondition(ctx, obs, metav1.ConditionFalse, inplacev1.ReasonCancelled, msg); err != nil {
		return err
	}
	if recorded {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("In-place update of a control-plane Machine cancelled", "Machine", klog.KRef(obs.kcp.Namespace, machineName), "withdrawn", withdrawn)
	r.Recorder.Eventf(obs.kcp, obs.machine(machineName), corev1.EventTypeNormal, inplacev1.EventUpdateCancelled, "Cancel", "%s", eventNote(msg))
	if m := obs.machine(machineName); m != nil && !withdrawn {
		// A withdrawal's Event on the Machine is the coordinator's.
		r.Recorder.Eventf(m, obs.kcp, corev1.EventTypeNormal, inplacev1.EventUpdateCancelled, "Cancel", "%s", eventNote(detail))
	}
	return nil
}

// retry forgets the Machine's failure record so that the next reconcile updates
// the Machine again. The hold and the pause stay (the Machine is still outdated);
// the Machine's retry annotation stays too, for the coordinator, which withdraws
// the failed plan and the node's verdict on it, then removes the annotation.
func (r *Reconciler) retry(ctx context.Context, obs *observed, d Decision) (ctrl.Result, error) {
	if err := r.forgetFailures(ctx, obs.machine(d.Machine)); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Retrying a failed in-place update of a control-plane Machine", "Machine", klog.KRef(obs.kcp.Namespace, d.Machine))
	return ctrl.Result{RequeueAfter: time.Millisecond}, r.setCondition(ctx, obs, metav1.ConditionFalse, inplacev1.ReasonInProgress, d.Message)
}

func (r *Reconciler) recheckAfter() time.Duration {
	if r.RecheckAfter > 0 {
		return r.RecheckAfter
	}
	return recheckRequeue
}

// maxEventNote is below the 1024 characters events.k8s.io/v1 accepts; the full text
// stays in the condition.
const maxEventNote = 1000

func eventNote(s string) string { return protocol.BoundText(s, maxEventNote) }

func eventFor(reason string) string {
	switch reason {
	case inplacev1.ReasonRolledBack:
		return inplacev1.EventUpdateRolledBack
	case inplacev1.ReasonDegraded:
		return inplacev1.EventNodeDegraded
	case inplacev1.ReasonPlanNotPickedUp:
		return inplacev1.EventPlanNotPickedUp
	case inplacev1.ReasonDeadlineExceeded:
		return inplacev1.EventDeadlineExceeded
	}
	return inplacev1.EventUpdateFailed
}

// release removes the hold (and CAPI's pause unless the operator had paused the KCP
// before the hold began) in one write that carries HoldReleaseAnnotation, the only
// kind of write the webhook lets drop a hold (it strips the marker itself). The
// optimistic lock makes a spec change that arrived since the observation conflict, and
// the next reconcile judges the new spec.
func (r *Reconciler) release(ctx context.Context, obs *observed, d Decision) error {
	target := obs.kcp.Annotations[inplacev1.HoldAnnotation]
	remove := map[string]*string{
		inplacev1.HoldReleaseAnnotation:        &target,
		inplacev1.HoldAnnotation:               nil,
		inplacev1.HoldOperatorPausedAnnotation: nil,
		inplacev1.HoldUpdatingAnnotation:       nil,
	}
	if _, operatorPaused := obs.kcp.Annotations[inplacev1.HoldOperatorPausedAnnotation]; !operatorPaused {
		remove[clusterv1.PausedAnnotation] = nil
	}
	status, reason := metav1.ConditionTrue, inplacev1.ReasonSucceeded
	if !obs.state().OptedIn || !obs.state().BelowThreshold {
		status, reason = metav1.ConditionFalse, inplacev1.ReasonReleased
	}
	// The condition and the Machines' failure records first: once released, KCP owns
	// the object again and this controller no longer looks at it, and a record left
	// behind would fail the next hold to the same target at once.
	if err := r.setCondition(ctx, obs, status, reason, d.Message); err != nil {
		return err
	}
	if err := r.forgetFailures(ctx, obs.machines...); err != nil {
		return err
	}
	if err := r.patchKCPAnnotations(ctx, obs.kcp, remove); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Released KubeadmControlPlane", "reason", d.Message)
	r.Recorder.Eventf(obs.kcp, nil, corev1.EventTypeNormal, eventHoldReleased, "Release", "%s", d.Message)
	return nil
}

// endUpdating removes the in-flight marker (HoldUpdatingAnnotation), if the KCP
// carries it.
func (r *Reconciler) endUpdating(ctx context.Context, kcp *controlplanev1.KubeadmControlPlane) error {
	if _, ok := kcp.Annotations[inplacev1.HoldUpdatingAnnotation]; !ok {
		return nil
	}
	return r.patchKCPAnnotations(ctx, kcp, map[string]*string{inplacev1.HoldUpdatingAnnotation: nil})
}

// patchKCPAnnotations sets (non-nil) or removes (nil) annotations with a merge patch
// under an optimistic lock, and updates kcp in place.
func (r *Reconciler) patchKCPAnnotations(ctx context.Context, kcp *controlplanev1.KubeadmControlPlane, set map[string]*string) error {
	orig := kcp.DeepCopy()
	if kcp.Annotations == nil {
		kcp.Annotations = map[string]string{}
	}
	for k, v := range set {
		if v == nil {
			delete(kcp.Annotations, k)
		} else {
			kcp.Annotations[k] = *v
		}
	}
	if err := r.Client.Patch(ctx, kcp, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patch annotations of KubeadmControlPlane %s: %w", kcp.Name, err)
	}
	return nil
}

// setCondition mirrors the InPlaceUpdate condition on the KubeadmControlPlane and the
// Cluster, patching status only when the condition changes.
func (r *Reconciler) setCondition(ctx context.Context, obs *observed, status metav1.ConditionStatus, reason, message string) error {
	_, err := r.writeCondition(ctx, obs, status, reason, message)
	return err
}

// writeCondition is setCondition, reporting whether the KubeadmControlPlane's
// condition changed, also when the Cluster's write then failed.
func (r *Reconciler) writeCondition(ctx context.Context, obs *observed, status metav1.ConditionStatus, reason, message string) (bool, error) {
	cond := metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: status, Reason: reason, Message: message}
	changed, err := r.setStatusCondition(ctx, obs.kcp, &obs.kcp.Status.Conditions, cond)
	if err != nil {
		return false, fmt.Errorf("set condition on KubeadmControlPlane %s: %w", obs.kcp.Name, err)
	}
	if obs.cluster.UID == "" {
		return changed, nil
	}
	if _, err := r.setStatusCondition(ctx, obs.cluster, &obs.cluster.Status.Conditions, cond); err != nil {
		return changed, fmt.Errorf("set condition on Cluster %s: %w", obs.cluster.Name, err)
	}
	return changed, nil
}

func (r *Reconciler) setStatusCondition(ctx context.Context, obj client.Object, conditions *[]metav1.Condition, cond metav1.Condition) (bool, error) {
	if cur := meta.FindStatusCondition(*conditions, cond.Type); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return false, nil
	}
	orig, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("copy %T", obj)
	}
	cond.ObservedGeneration = obj.GetGeneration()
	meta.SetStatusCondition(conditions, cond)
	// The optimistic lock keeps conditions written concurrently by KCP or the Cluster
	// controller: a merge patch replaces the whole list.
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, err
	}
	return true, nil
}
