package coordinator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
)

// MachineDrain is what a Machine says about draining its node, in Cluster API's
// own fields, which its machine controller honours before it deletes a node and
// the coordinator honours the same way before an in-place update.
type MachineDrain struct {
	// Excluded: the machine.cluster.x-k8s.io/exclude-node-draining annotation is
	// set; no pod is evicted.
	Excluded bool
	// SkipVolumeDetach: the
	// machine.cluster.x-k8s.io/exclude-wait-for-node-volume-detach annotation is
	// set; attached volumes are not waited for.
	SkipVolumeDetach bool
	// DrainTimeout is spec.deletion.nodeDrainTimeoutSeconds (zero: none). Once it
	// has passed the update goes on with whatever pods are left, as Cluster API
	// goes on deleting; without it the policy's drain timeout fails the update.
	DrainTimeout time.Duration
	// VolumeDetachTimeout is spec.deletion.nodeVolumeDetachTimeoutSeconds (zero:
	// none); once it has passed the update goes on with volumes still attached.
	VolumeDetachTimeout time.Duration
}

// MachineDrainOf reads a Machine's drain settings.
func MachineDrainOf(m *clusterv1.Machine) MachineDrain {
	_, excluded := m.Annotations[clusterv1.ExcludeNodeDrainingAnnotation]
	_, skipVolumes := m.Annotations[clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation]
	seconds := func(p *int32) time.Duration {
		if p == nil || *p <= 0 {
			return 0
		}
		return time.Duration(*p) * time.Second
	}
	return MachineDrain{Excluded: excluded, SkipVolumeDetach: skipVolumes,
		DrainTimeout: seconds(m.Spec.Deletion.NodeDrainTimeoutSeconds), VolumeDetachTimeout: seconds(m.Spec.Deletion.NodeVolumeDetachTimeoutSeconds)}
}

// DrainOver reports whether the drain is over without evicting anything more:
// the Machine excludes its node from draining, or its own drain timeout has
// passed since the update started.
func (md MachineDrain) DrainOver(elapsed time.Duration) bool {
	return md.Excluded || (md.DrainTimeout > 0 && elapsed >= md.DrainTimeout)
}

// VolumeWaitOver reports whether attached volumes are no longer waited for: the
// Machine skips the wait, or its volume-detach timeout has passed since the drain
// ended (sinceDrained), as Cluster API counts it.
func (md MachineDrain) VolumeWaitOver(sinceDrained time.Duration) bool {
	return md.SkipVolumeDetach || (md.VolumeDetachTimeout > 0 && sinceDrained >= md.VolumeDetachTimeout)
}

// DrainMachineVerdict turns one drain attempt (and the volumes still attached,
// when the drain is done) into a decision: ok means the node may be updated.
// Without a Machine drain timeout the policy's timeout bounds drain and volume
// detach together and ends in a failure; with one, the drain waits until it and
// then goes on. The Machine's volume-detach timeout counts from drained, when the
// drain ended (zero: now, it just ended).
func DrainMachineVerdict(node string, md MachineDrain, res drain.Result, volumes []string, started, drained, now time.Time, policyTimeout time.Duration) (Decision, bool) {
	var elapsed, sinceDrained time.Duration
	if !started.IsZero() {
		elapsed = max(now.Sub(started), 0)
	}
	if !drained.IsZero() {
		sinceDrained = max(now.Sub(drained), 0)
	}
	if !res.Done {
		if md.DrainTimeout > 0 {
			return Decision{Action: ActWait, RetryAfterSeconds: retryDrain, Message: stepMsg(stepDrain,
				"draining node %s: %s (the Machine's nodeDrainTimeoutSeconds ends the drain after %s)", node, res.Summary(), md.DrainTimeout)}, false
		}
		return DrainVerdict(node, res, started, now, policyTimeout)
	}
	if len(volumes) == 0 || md.VolumeWaitOver(sinceDrained) {
		return Decision{}, true
	}
	what := volumes[0]
	if n := len(volumes) - 1; n > 0 {
		what += fmt.Sprintf(" (and %d more)", n)
	}
	if md.VolumeDetachTimeout == 0 && policyTimeout > 0 && elapsed > policyTimeout {
		return Decision{Action: ActReportFailure, Cause: CauseDrainTimeout, Message: stepMsg(stepDrain,
			"node %s: volumes did not detach within %s: %s is still attached", node, policyTimeout, what)}, false
	}
	return Decision{Action: ActWait, RetryAfterSeconds: retryDrain, Message: stepMsg(stepDrain,
		"waiting for the volumes of node %s to detach: %s is still attached", node, what)}, false
}

// drainClock returns the Machine's drain settings and the update's start and
// current time (started is zero when the node carries no start marker).
func (c *Coordinator) drainClock(s *scope) (md MachineDrain, started, now time.Time, elapsed time.Duration) {
	md = MachineDrainOf(s.machine)
	now = c.opts.Now()
	started, _ = time.Parse(time.RFC3339, s.node.GetAnnotations()[inplacev1.UpdateStartedAnnotation])
	if !started.IsZero() {
		elapsed = max(now.Sub(started), 0)
	}
	return md, started, now, elapsed
}

// attemptDrain makes one drain pass over the node as Cluster API drains a
// Machine's node (drain.AttemptMachine: MachineDrainRules, the drain label),
// unless the Machine excludes its node from draining or its own drain timeout
// has passed: then the drain counts as done with whatever is left on the node.
func (c *Coordinator) attemptDrain(ctx context.Context, s *scope) (drain.Result, error) {
	md, _, _, elapsed := c.drainClock(s)
	if md.DrainOver(elapsed) {
		if !md.Excluded {
			c.opts.Recorder.Eventf(s.machine, nil, corev1.EventTypeWarning, inplacev1.EventDrainBlocked, "Drain",
				"the Machine's nodeDrainTimeoutSeconds (%s) has passed: updating node %s with the pods still on it", md.DrainTimeout, s.node.Name)
		}
		return drain.Result{Done: true}, nil
	}
	return drain.AttemptMachine(ctx, drain.Machine{Management: c.opts.Client, Workload: s.wc.Client, Evictions: s.wc.Clientset, Cluster: s.cluster, Machine: s.machine},
		s.node.Name, c.drainOptions())
}

// drainedAt is when this update's drain ended (DrainedAnnotation), zero when it
// has not or the mark belongs to an earlier update (it is older than started).
func drainedAt(node client.Object, started time.Time) time.Time {
	drained, err := time.Parse(time.RFC3339, node.GetAnnotations()[inplacev1.DrainedAnnotation])
	if err != nil || started.IsZero() || drained.Before(started) {
		return time.Time{}
	}
	return drained
}

// markDrained records on the node when this update's drain ended, once: the
// Machine's volume-detach timeout counts from it across coordinator restarts.
func (c *Coordinator) markDrained(ctx context.Context, s *scope, started, now time.Time) (time.Time, error) {
	if d := drainedAt(s.node, started); !d.IsZero() {
		return d, nil
	}
	before := s.node.DeepCopy()
	ann := s.node.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	now = now.UTC().Truncate(time.Second)
	ann[inplacev1.DrainedAnnotation] = now.Format(time.RFC3339)
	s.node.SetAnnotations(ann)
	if err := s.wc.Client.Patch(ctx, s.node, client.MergeFrom(before)); err != nil {
		return time.Time{}, fmt.Errorf("mark node %s drained: %w", s.node.Name, err)
	}
	return now, nil
}

// finishDrain decides on a drain pass (DrainMachineVerdict): once the node is
// drained it waits for the node's volumes to detach, as Cluster API's machine
// controller does before it deletes a node, since the agent may reboot it.
func (c *Coordinator) finishDrain(ctx context.Context, s *scope, res drain.Result) (Outcome, bool) {
	md, started, now, _ := c.drainClock(s)
	var volumes []string
	drained := drainedAt(s.node, started)
	over := !drained.IsZero() && md.VolumeWaitOver(now.Sub(drained))
	if res.Done && !md.SkipVolumeDetach && !over {
		var err error
		if volumes, err = drain.AttachedVolumes(ctx, s.wc.Client, s.node); err != nil {
			return c.workloadFailure(s, stepDrain, err), false
		}
		if len(volumes) > 0 && md.VolumeDetachTimeout > 0 {
			if drained, err = c.markDrained(ctx, s, started, now); err != nil {
				return c.workloadFailure(s, stepDrain, err), false
			}
		}
	}
	d, ok := DrainMachineVerdict(s.node.Name, md, res, volumes, started, drained, now, c.opts.Drain.Timeout)
	if ok {
		c.clearDrainBlocked(ctx, s)
		return Outcome{}, true
	}
	if len(res.Blockers) > 0 {
		c.showDrainBlocked(ctx, s, d.Message)
	}
	if d.Action == ActReportFailure {
		return retryable(d.Cause, d.Message), false
	}
	return inProgress(d.RetryAfterSeconds, d.Message), false
}

// showDrainBlocked puts a blocked drain on the Machine's InPlaceUpdate condition
// (DrainBlocked, naming what refuses the eviction), where `status`, `fleet status`
// and the FleetRollout controller see why the node is cordoned, and records an
// Event when the condition changed. The message names the blocker and the node,
// not the time spent, so that a drain blocked for an hour writes once.
func (c *Coordinator) showDrainBlocked(ctx context.Context, s *scope, message string) {
	if changed, _ := c.showHeld(ctx, s, inplacev1.ReasonDrainBlocked, message); changed {
		c.opts.Recorder.Eventf(s.stored, nil, corev1.EventTypeWarning, inplacev1.EventDrainBlocked, "Drain", "%s", message)
	}
}

// clearDrainBlocked says the update goes on once a drain that showDrainBlocked
// reported is over, so that the Machine is no longer shown held by its drain.
func (c *Coordinator) clearDrainBlocked(ctx context.Context, s *scope) {
	c.clearHeld(ctx, s, inplacev1.ReasonDrainBlocked, fmt.Sprintf("node %s drained", s.node.Name))
}

// showHeld puts a hold of the update on the Machine's InPlaceUpdate condition
// (False, reason, message). changed says the condition changed, newReason that
// it took reason now; both false when the write failed, which is logged and
// retried by the next call.
func (c *Coordinator) showHeld(ctx context.Context, s *scope, reason, message string) (changed, newReason bool) {
	cur := meta.FindStatusCondition(s.stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	newReason = cur == nil || cur.Reason != reason
	changed, err := c.setMachineCondition(ctx, s.stored, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition,
		Status: metav1.ConditionFalse, Reason: reason, Message: message})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not show the hold on the Machine; the next call retries", "reason", reason, "error", err.Error())
		return false, false
	}
	return changed, changed && newReason
}

// clearHeld says the update goes on (InPlaceUpdateInProgress, message) once a hold
// that showHeld put on the Machine with reason held is over, so that the Machine
// is no longer shown held; any other condition is left as it is. A failed write is
// left to the update's end, whose report replaces the condition.
func (c *Coordinator) clearHeld(ctx context.Context, s *scope, held, message string) {
	if cur := meta.FindStatusCondition(s.stored.Status.Conditions, inplacev1.InPlaceUpdateCondition); cur == nil || cur.Reason != held {
		return
	}
	if _, err := c.setMachineCondition(ctx, s.stored, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition,
		Status: metav1.ConditionFalse, Reason: inplacev1.ReasonInProgress, Message: message}); err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not clear the hold on the Machine", "reason", held, "error", err.Error())
	}
}
