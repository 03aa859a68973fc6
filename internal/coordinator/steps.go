package coordinator

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// cordon marks the node unschedulable and records that we did, plus when the update
// started; a node an operator cordoned keeps their cordon and gets only the start time.
func (c *Coordinator) cordon(ctx context.Context, s *scope) error {
	before := s.node.DeepCopy()
	ann := s.node.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	changed := false
	if !s.node.Spec.Unschedulable {
		s.node.Spec.Unschedulable = true
		ann[inplacev1.CordonedByAnnotation] = cordonedByValue
		changed = true
	}
	if ann[inplacev1.UpdateStartedAnnotation] == "" {
		ann[inplacev1.UpdateStartedAnnotation] = c.opts.Now().UTC().Format(time.RFC3339)
		changed = true
	}
	if !changed {
		return nil
	}
	s.node.SetAnnotations(ann)
	if err := s.wc.Client.Patch(ctx, s.node, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("cordon node %s: %w", s.node.Name, err)
	}
	c.opts.Recorder.Eventf(s.machine, nil, corev1.EventTypeNormal, inplacev1.EventDrainStarted, "Drain",
		"cordoned node %s and started draining it for an in-place update", s.node.Name)
	return nil
}

// drain makes one bounded eviction attempt (drainrules.go: as Cluster API drains a
// Machine's node) and waits for its volumes to detach; ok means the node is drained.
func (c *Coordinator) drain(ctx context.Context, s *scope) (Outcome, bool) {
	if c.opts.Drain.SkipEviction {
		return Outcome{}, true
	}
	single, err := c.singleNode(ctx, s)
	if err != nil {
		return c.workloadFailure(s, stepDrain, err), false
	}
	if single && !c.opts.Drain.EvictSingleNode {
		// A single-node cluster has nowhere to move pods to: evicting them only
		// causes an outage, and PDBs would block forever.
		return Outcome{}, true
	}
	mark(ctx, "drainNodes")
	res, err := c.attemptDrain(ctx, s)
	mark(ctx, "evict")
	if err != nil {
		return c.workloadFailure(s, stepDrain, err), false
	}
	s.drainBlocker = blockingPDB(res)
	return c.finishDrain(ctx, s, res)
}

// singleNode reports whether the node is its cluster's only one. A cache that
// holds a second Node answers "no" without a request: a Node it holds existed, and
// the wrong answer that a cache behind a deletion gives is the safe one (the node
// is drained, as any node of a larger cluster). A cache holding one Node, or none
// served, is checked live: skipping the drain must never rest on an old state.
func (c *Coordinator) singleNode(ctx context.Context, s *scope) (bool, error) {
	if c.opts.Caches != nil && !c.fromCache {
		if cached, _, ok := c.opts.Caches.Workloads.For(ctx, s.clusterKey, s.wc, s.node.Name); ok {
			nodes := &corev1.NodeList{}
			if err := cached.Client.List(ctx, nodes, client.Limit(2)); err == nil && len(nodes.Items) > 1 {
				return false, nil
			}
		}
	}
	nodes := &corev1.NodeList{}
	if err := s.wc.Client.List(ctx, nodes, client.Limit(2)); err != nil {
		return false, err
	}
	return len(nodes.Items) == 1 && nodes.Continue == "", nil
}

// publish writes the plan Secret, then points the node's desired-plan annotation at
// it, in that order so that the agent never sees a hash without its plan. It writes
// nothing when both already hold the plan.
func (c *Coordinator) publish(ctx context.Context, s *scope) (bool, error) {
	written, err := c.writePlanSecret(ctx, s)
	if err != nil {
		return false, err
	}
	if ann := s.node.GetAnnotations(); ann[inplacev1.DesiredPlanAnnotation] != s.planHash || ann[inplacev1.PlanPublishedAnnotation] == "" {
		before := s.node.DeepCopy()
		if ann == nil {
			ann = map[string]string{}
		}
		if ann[inplacev1.DesiredPlanAnnotation] != s.planHash || ann[inplacev1.PlanPublishedAnnotation] == "" {
			// Dates the agent's pick-up deadline.
			ann[inplacev1.PlanPublishedAnnotation] = c.opts.Now().UTC().Format(time.RFC3339)
		}
		ann[inplacev1.DesiredPlanAnnotation] = s.planHash
		s.node.SetAnnotations(ann)
		if err := s.wc.Client.Patch(ctx, s.node, client.MergeFrom(before)); err != nil {
			return written, fmt.Errorf("annotate node %s with plan %s: %w", s.node.Name, s.planHash, err)
		}
		written = true
	}
	return written, nil
}

// writePlanSecret writes the plan, sealed to the node's key, into the node's plan
// Secret unless it holds it already; written reports a write.
func (c *Coordinator) writePlanSecret(ctx context.Context, s *scope) (bool, error) {
	written := false
	labels := map[string]string{inplacev1.PlanNodeLabel: s.node.Name, inplacev1.ManagedByLabel: inplacev1.ManagedByValue}
	data, err := sealedPlanData(s, s.agentKey)
	if err != nil {
		return false, err
	}
	switch {
	case s.planSecret == nil:
		sec := &corev1.Secret{}
		sec.Namespace, sec.Name = inplacev1.AgentNamespace, inplacev1.PlanSecretName(s.node.Name)
		sec.Labels = labels
		sec.Type = corev1.SecretTypeOpaque
		sec.Data = data
		if err := s.wc.Client.Create(ctx, sec); err != nil {
			return false, fmt.Errorf("create plan secret for node %s: %w", s.node.Name, err)
		}
		s.planSecret, written = sec, true
	case data != nil || s.planSecret.Labels[inplacev1.PlanNodeLabel] != s.node.Name:
		sec := s.planSecret.DeepCopy()
		if sec.Labels == nil {
			sec.Labels = map[string]string{}
		}
		for k, v := range labels {
			sec.Labels[k] = v
		}
		if data != nil {
			sec.Data = data
		}
		// Update, not patch: the resourceVersion guards against a concurrent writer.
		if err := s.wc.Client.Update(ctx, sec); err != nil {
			return false, fmt.Errorf("update plan secret for node %s: %w", s.node.Name, err)
		}
		s.planSecret, written = sec, true
	}
	if s.retried {
		c.endRetry(ctx, s)
	}
	return written, nil
}

// endRetry removes the retry's mark (RetriedPlanAnnotation) once the plan built
// again is in the plan Secret: from then on it is kept as any published plan.
// Best effort: until the mark goes, each call builds the same plan again, and a
// plan other than the withdrawn one is kept whatever the mark says.
func (c *Coordinator) endRetry(ctx context.Context, s *scope) {
	err := c.patchMachineAnnotations(ctx, s.stored, "end the retry of", func(ann map[string]string) bool {
		_, ok := ann[inplacev1.RetriedPlanAnnotation]
		delete(ann, inplacev1.RetriedPlanAnnotation)
		return ok
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not remove the retry's mark; the next call does", "error", err.Error())
		return
	}
	s.retried = false
}

// finish uncordons a node we cordoned and clears our markers. Later calls find
// nothing to clear.
func (c *Coordinator) finish(ctx context.Context, s *scope) error {
	return c.patchNode(ctx, s, "uncordon", func(n *corev1.Node, ann map[string]string) {
		if _, ok := ann[inplacev1.CordonedByAnnotation]; ok {
			n.Spec.Unschedulable = false
			delete(ann, inplacev1.CordonedByAnnotation)
		}
		delete(ann, inplacev1.UpdateStartedAnnotation)
		delete(ann, inplacev1.PlanPublishedAnnotation)
		delete(ann, inplacev1.DeadlineExceededAnnotation)
		if ann[inplacev1.PlanNotPickedUpAnnotation] != s.planHash {
			delete(ann, inplacev1.PlanNotPickedUpAnnotation) // about an older plan
		}
	})
}

// abandon withdraws a plan the agent never picked up, marks it as not picked up and
// puts the node back in service (if we cordoned it): nothing on the node changed.
func (c *Coordinator) abandon(ctx context.Context, s *scope) error {
	// Precondition on the Node as read: the agent claims a plan with the same one
	// (agent/claim.go), so a withdrawal and a pick-up never both land.
	return c.patchNodeAs(ctx, s, "withdraw the plan from", true, func(n *corev1.Node, ann map[string]string) {
		if ann[inplacev1.DesiredPlanAnnotation] == s.planHash {
			delete(ann, inplacev1.DesiredPlanAnnotation)
		}
		ann[inplacev1.PlanNotPickedUpAnnotation] = s.planHash
		if _, ok := ann[inplacev1.CordonedByAnnotation]; ok {
			n.Spec.Unschedulable = false
			delete(ann, inplacev1.CordonedByAnnotation)
		}
		delete(ann, inplacev1.UpdateStartedAnnotation)
		delete(ann, inplacev1.PlanPublishedAnnotation)
	})
}

// patchNode applies mutate to the node and patches it when anything changed.
func (c *Coordinator) patchNode(ctx context.Context, s *scope, verb string, mutate func(*corev1.Node, map[string]string)) error {
	return c.patchNodeAs(ctx, s, verb, false, mutate)
}

// patchNodeAs is patchNode; locked makes the patch conditional on the node's
// resourceVersion as read (a Conflict when anything changed since).
func (c *Coordinator) patchNodeAs(ctx context.Context, s *scope, verb string, locked bool, mutate func(*corev1.Node, map[string]string)) error {
	before := s.node.DeepCopy()
	ann := s.node.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	mutate(s.node, ann)
	s.node.SetAnnotations(ann)
	if equality.Semantic.DeepEqual(before.Spec, s.node.Spec) && equality.Semantic.DeepEqual(before.Annotations, s.node.Annotations) {
		return nil
	}
	patch := client.MergeFrom(before)
	if locked {
		patch = client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	}
	if err := s.wc.Client.Patch(ctx, s.node, patch); err != nil {
		*s.node = *before
		return fmt.Errorf("%s node %s: %w", verb, s.node.Name, err)
	}
	return nil
}

// report records the end of an update on the Machine: the InPlaceUpdate condition
// and, when the condition changed, an Event. A failed write is retried by the next
// call (the answer does not depend on it).
func (c *Coordinator) report(ctx context.Context, s *scope, d Decision) {
	if err := c.writeReport(ctx, s, d); err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not set the Machine's condition; the next call retries", "error", err.Error())
	}
}

// writeReport is report's write: the condition of decision d on the stored
// Machine, and the Event when the condition changed.
func (c *Coordinator) writeReport(ctx context.Context, s *scope, d Decision) error {
	cond := metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Message: d.Message}
	eventType := corev1.EventTypeWarning
	switch {
	case d.Action == ActSucceed:
		cond.Status, cond.Reason, eventType = metav1.ConditionTrue, inplacev1.ReasonSucceeded, corev1.EventTypeNormal
	case d.Cause == CauseDeadlineExceeded:
		cond.Reason = inplacev1.ReasonDeadlineExceeded
	case d.Action == ActDegraded:
		cond.Reason = inplacev1.ReasonDegraded
	case d.Action == ActAbandon:
		cond.Reason = inplacev1.ReasonPlanNotPickedUp
	default:
		cond.Reason = inplacev1.ReasonFailed
		if d.Cause == CauseRolledBack {
			cond.Reason = inplacev1.ReasonRolledBack
		}
	}
	changed, err := c.setMachineCondition(ctx, s.stored, cond)
	if err != nil {
		return err
	}
	if changed {
		c.opts.Recorder.Eventf(s.stored, nil, eventType, d.EventReason, "Update", "%s", d.Message)
	}
	return nil
}

// setMachineCondition writes cond on the stored Machine's status unless it is
// already there, its message redacted (protocol.RedactKnownSecrets: messages quote
// agent status and errors), as redactingRecorder redacts every Event's note. The
// optimistic lock keeps conditions CAPI writes concurrently. A
// conflict (the Machine changed since this call read it) reads the Machine again
// and retries: the answer that follows is often done, after which no call comes
// to retry the write.
func (c *Coordinator) setMachineCondition(ctx context.Context, m *clusterv1.Machine, cond metav1.Condition) (changed bool, err error) {
	cond.Message = protocol.RedactKnownSecrets(cond.Message)
	first := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			if err := c.opts.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return err
			}
		}
		first = false
		if cur := meta.FindStatusCondition(m.Status.Conditions, cond.Type); cur != nil &&
			cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
			changed = false
			return nil
		}
		orig := m.DeepCopy()
		cond.ObservedGeneration = m.Generation
		meta.SetStatusCondition(&m.Status.Conditions, cond)
		if err := c.opts.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			*m = *orig
			return err
		}
		changed = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("set condition %s on Machine %s: %w", cond.Type, m.Name, err)
	}
	return changed, nil
}
