package coordinator

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// cordonedByValue is the value of CordonedByAnnotation on nodes we cordoned.
const cordonedByValue = "capi-inplace"

// controlPlaneNodeLabel marks control-plane Nodes (set by kubeadm).
const controlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"

// scope is everything one call knows, loaded once at its start.
type scope struct {
	machine    *clusterv1.Machine // desired spec, identity and status from the API
	stored     *clusterv1.Machine // as stored: conditions are written on it
	cluster    *clusterv1.Cluster
	clusterKey client.ObjectKey
	wc         *WorkloadCluster
	node       *corev1.Node

	plan       *protocol.NodePlan
	planHash   string
	planJSON   []byte
	planSecret *corev1.Secret  // as found in the workload cluster; nil when absent
	agentKey   *ecdh.PublicKey // the node's key, which the plan is sealed to (awaitAgentKey)

	drainBlocker string // the PDB that refused an eviction in this call (metrics.go)
}

func (c *Coordinator) update(ctx context.Context, desired desiredObjects) (out Outcome) {
	s, out, ok := c.loadScope(ctx, desired)
	if !ok {
		return out
	}
	o := observe(s, c.opts.Now())
	before := marksOf(s)
	defer func() { c.recordCall(s, before, o, out) }()
	o.PickupTimeout = c.opts.PickupTimeout
	d := Decide(o)
	if out, held := c.fleetCheck(ctx, s, o, d); held {
		return out
	}
	switch d.Action {
	case ActWait:
		return inProgress(d.RetryAfterSeconds, d.Message)
	case ActReportFailure:
		return retryable(d.Cause, d.Message)
	case ActAwaitAgent:
		// Keep the published plan in place (someone may have deleted it) and the
		// agent installed; both are no-ops when nothing changed.
		if out, ok := c.ensureAgent(ctx, s, stepApply); !ok {
			return out
		}
		if out, ok := c.awaitAgentKey(s); !ok {
			return out
		}
		if _, err := c.publish(ctx, s); err != nil {
			return c.workloadFailure(s, stepPublish, err)
		}
		return inProgress(d.RetryAfterSeconds, d.Message)
	case ActSucceed, ActFail:
		if err := c.finish(ctx, s); err != nil {
			return c.workloadFailure(s, stepVerify, err)
		}
		if out, ok := c.liftRemediationHold(ctx, s); !ok {
			return out
		}
		c.report(ctx, s, d)
		if d.Action == ActFail {
			return final(d.Cause, d.Message)
		}
		return done(d.Message)
	case ActDegraded:
		// The node stays cordoned (and keeps our cordoned-by marker, so that a
		// successful retry after the repair uncordons it).
		if out, ok := c.liftRemediationHold(ctx, s); !ok {
			return out
		}
		c.report(ctx, s, d)
		return final(d.Cause, d.Message)
	case ActAbandon:
		if err := c.abandon(ctx, s); err != nil {
			return c.workloadFailure(s, stepApply, err)
		}
		if out, ok := c.liftRemediationHold(ctx, s); !ok {
			return out
		}
		c.report(ctx, s, d)
		return final(d.Cause, d.Message)
	default:
		return c.start(ctx, s)
	}
}

// start runs the steps before the agent takes over: agent, cordon, drain, publish.
func (c *Coordinator) start(ctx context.Context, s *scope) Outcome {
	if out, ok := c.ensureAgent(ctx, s, stepAgent); !ok {
		return out
	}
	if out, ok := c.awaitAgentKey(s); !ok {
		return out
	}
	if out, ok := c.stage(ctx, s); !ok {
		return out
	}
	if err := c.protectFromRemediation(ctx, s); err != nil {
		return retryable(CauseManagementAPI, stepMsg(stepCordon, "%v", err))
	}
	if err := c.cordon(ctx, s); err != nil {
		return c.workloadFailure(s, stepCordon, err)
	}
	if out, ok := c.drain(ctx, s); !ok {
		return out
	}
	written, err := c.publish(ctx, s)
	if err != nil {
		return c.workloadFailure(s, stepPublish, err)
	}
	if written {
		c.opts.Recorder.Eventf(s.machine, nil, corev1.EventTypeNormal, inplacev1.EventPlanPublished, "PublishPlan",
			"published plan %s for node %s (kubernetes %s, kubeadm %s)", short(s.planHash), s.node.Name, s.plan.Kubernetes.Version, s.plan.Kubernetes.Action)
	}
	return inProgress(waitRetry(0), stepMsg(stepApply, "waiting for the agent on node %s to pick up plan %s", s.node.Name, short(s.planHash)))
}

// step is the step the update is at, for the message of a failure: ensuring the
// agent is step 1 of a new update and repeated at step 5 while the agent works.
func (c *Coordinator) ensureAgent(ctx context.Context, s *scope, step int) (Outcome, bool) {
	if !c.opts.ManageAgents {
		return Outcome{}, true
	}
	applied, err := agentinstall.Ensure(ctx, s.wc.Client, c.agentConfig(s.cluster))
	if err != nil {
		return c.workloadFailure(s, step, err), false
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Installed the node agent", "Cluster", s.clusterKey.String(), "image", c.opts.AgentImage)
	}
	return Outcome{}, true
}

// awaitAgentKey reads the node's key into the scope (nodeAgentKey): in progress
// while the agent has not published one.
func (c *Coordinator) awaitAgentKey(s *scope) (Outcome, bool) {
	key, err := nodeAgentKey(s)
	switch {
	case errors.Is(err, nodeplan.ErrNoAgentKey):
		return inProgress(retryAgentKey, agentKeyWaitMessage(s)), false
	case err != nil:
		return retryable(CauseInvalidInput, stepMsg(stepAgent, "%v", err)), false
	}
	s.agentKey = key
	return Outcome{}, true
}

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
	nodes := &corev1.NodeList{}
	if err := s.wc.Client.List(ctx, nodes, client.Limit(2)); err != nil {
		return c.workloadFailure(s, stepDrain, err), false
	}
	if len(nodes.Items) == 1 && nodes.Continue == "" && !c.opts.Drain.EvictSingleNode {
		// A single-node cluster has nowhere to move pods to: evicting them only
		// causes an outage, and PDBs would block forever.
		return Outcome{}, true
	}
	res, err := c.attemptDrain(ctx, s)
	if err != nil {
		return c.workloadFailure(s, stepDrain, err), false
	}
	s.drainBlocker = blockingPDB(res)
	return c.finishDrain(ctx, s, res)
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
	return written, nil
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
	cond := metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Message: protocol.RedactKnownSecrets(d.Message)}
	eventType := corev1.EventTypeWarning
	switch d.Action {
	case ActSucceed:
		cond.Status, cond.Reason, eventType = metav1.ConditionTrue, inplacev1.ReasonSucceeded, corev1.EventTypeNormal
	case ActDegraded:
		cond.Reason = inplacev1.ReasonDegraded
	case ActAbandon:
		cond.Reason = inplacev1.ReasonPlanNotPickedUp
	default:
		cond.Reason = inplacev1.ReasonFailed
		if d.Cause == CauseRolledBack {
			cond.Reason = inplacev1.ReasonRolledBack
		}
	}
	changed, err := c.setMachineCondition(ctx, s.stored, cond)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not set the Machine's condition; the next call retries", "error", err.Error())
		return
	}
	if changed {
		c.opts.Recorder.Eventf(s.stored, nil, eventType, d.EventReason, "Update", "%s", d.Message)
	}
}

// setMachineCondition writes cond on the stored Machine's status unless it is
// already there; the optimistic lock keeps conditions CAPI writes concurrently.
func (c *Coordinator) setMachineCondition(ctx context.Context, m *clusterv1.Machine, cond metav1.Condition) (bool, error) {
	if cur := meta.FindStatusCondition(m.Status.Conditions, cond.Type); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
		return false, nil
	}
	orig := m.DeepCopy()
	cond.ObservedGeneration = m.Generation
	meta.SetStatusCondition(&m.Status.Conditions, cond)
	if err := c.opts.Client.Status().Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		*m = *orig
		return false, fmt.Errorf("set condition %s on Machine %s: %w", cond.Type, m.Name, err)
	}
	return true, nil
}

// workloadFailure answers an error talking to the workload cluster: in progress when
// the cluster may come back (its only API server restarts during a control-plane
// upgrade), Failure when the cluster answered and refused.
func (c *Coordinator) workloadFailure(s *scope, step int, err error) Outcome {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Another replica of the extension (every replica answers hooks) or another
		// writer got there first; the next call sees its result.
		return inProgress(retryDrain, stepMsg(step, "retrying after a concurrent change: %v", err))
	}
	if unreachable(err) {
		c.opts.Clusters.Invalidate(s.clusterKey)
		return inProgress(retryUnreachable, stepMsg(step, "waiting for the API server of cluster %s: %v", s.clusterKey.Name, err))
	}
	return retryable(CauseWorkloadAPI, stepMsg(step, "%v", err))
}

// unreachable reports whether err means the API server did not answer (or answered
// that it cannot serve now), as opposed to a definite refusal.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return !errors.Is(err, nodeplan.ErrInput)
	}
	// A server error without a reason (a control-plane node's kube-apiserver starting
	// after its upgrade answered discovery with one, "unknown", on the real-node lane)
	// is no refusal; a client error without a reason (a webhook's denial) is.
	status := st.Status()
	return apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnauthorized(err) ||
		(status.Reason == metav1.StatusReasonUnknown && (status.Code == 0 || status.Code >= 500)) || authorizerWarmingUp(err)
}

// loadScope reads everything one call needs besides the desired objects. ok is
// false when the call must answer right away with out.
func (c *Coordinator) loadScope(ctx context.Context, desired desiredObjects) (*scope, Outcome, bool) {
	mkey := client.ObjectKeyFromObject(desired.stored)
	s := &scope{machine: desired.machine, stored: desired.stored}

	nodeName := desired.stored.Status.NodeRef.Name
	if nodeName == "" {
		return nil, inProgress(retryNoNodeRef, stepMsg(stepAgent, "waiting for Machine %s to report its node (status.nodeRef)", mkey)), false
	}
	// The cluster comes from the stored Machine, never from a request.
	clusterName := clusterNameOf(desired.stored)
	if clusterName == "" {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("Machine %s names no Cluster", mkey)), false
	}
	s.clusterKey = client.ObjectKey{Namespace: mkey.Namespace, Name: clusterName}
	s.cluster = &clusterv1.Cluster{}
	if err := c.opts.Client.Get(ctx, s.clusterKey, s.cluster); err != nil {
		return nil, retryable(CauseManagementAPI, fmt.Sprintf("read Cluster %s: %v", s.clusterKey, err)), false
	}

	wc, err := c.opts.Clusters.Get(ctx, s.clusterKey)
	if err != nil {
		c.opts.Clusters.Invalidate(s.clusterKey)
		return nil, inProgress(retryUnreachable, stepMsg(stepUnknown, "waiting for a connection to cluster %s: %v", s.clusterKey.Name, err)), false
	}
	s.wc = wc
	s.node = &corev1.Node{}
	if err := wc.Client.Get(ctx, client.ObjectKey{Name: nodeName}, s.node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, retryable(CauseNodeMissing, fmt.Sprintf("node %s of Machine %s does not exist in cluster %s", nodeName, mkey, s.clusterKey.Name)), false
		}
		return nil, c.workloadFailure(s, stepUnknown, fmt.Errorf("read node %s: %w", nodeName, err)), false
	}

	published, err := c.loadPublished(ctx, s)
	if err != nil {
		return nil, c.workloadFailure(s, stepUnknown, err), false
	}
	in, err := c.planInput(ctx, s, desired)
	if err != nil {
		if errors.Is(err, nodeplan.ErrInput) {
			return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
		}
		return nil, c.workloadFailure(s, stepUnknown, err), false
	}
	built, err := nodeplan.Build(in)
	if err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
	}
	if err := c.addRegistryCredentials(ctx, built); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("build plan for node %s: %v", nodeName, err)), false
	}
	s.plan = nodeplan.PinPublished(built, published)
	if s.planJSON, err = protocol.EncodePlan(s.plan); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("encode plan for node %s: %v", nodeName, err)), false
	}
	if s.planHash, err = s.plan.Hash(); err != nil {
		return nil, retryable(CauseInvalidInput, fmt.Sprintf("hash plan for node %s: %v", nodeName, err)), false
	}
	return s, Outcome{}, true
}

// loadPublished reads the node's plan Secret and the header of the sealed plan in it
// (the coordinator cannot open it); an undecodable plan counts as none (it is
// replaced by the next publish).
func (c *Coordinator) loadPublished(ctx context.Context, s *scope) (*protocol.SealedPlan, error) {
	sec := &corev1.Secret{}
	err := s.wc.Client.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(s.node.Name)}, sec)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read plan secret of node %s: %w", s.node.Name, err)
	}
	s.planSecret = sec
	return nodeplan.Published(sec.Data[inplacev1.PlanSecretDataKey]), nil
}

// planInput gathers the inputs of nodeplan.Build. Errors wrapping nodeplan.ErrInput
// are about the desired objects; others are I/O.
func (c *Coordinator) planInput(ctx context.Context, s *scope, desired desiredObjects) (nodeplan.Input, error) {
	in := nodeplan.Input{
		Machine:  s.machine,
		NodeName: s.node.Name,
		Secrets:  map[string]map[string][]byte{},
		Node:     nodeplan.NodeFacts{KubeletVersion: s.node.Status.NodeInfo.KubeletVersion},
	}
	if c.opts.Preflight != nil {
		in.IgnorePreflightErrors = c.opts.Preflight.IgnorePreflightErrors(s.machine.Namespace, s.machine.Labels)
	}
	cfg, err := decodeKubeadmConfig(desired.bootstrap)
	if err != nil {
		return in, err
	}
	in.KubeadmConfig = cfg
	for _, name := range nodeplan.SecretRefs(cfg) {
		sec := &corev1.Secret{}
		err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: s.machine.Namespace, Name: name}, sec)
		switch {
		case apierrors.IsNotFound(err):
			continue // Build reports it with the file that needs it.
		case err != nil:
			return in, fmt.Errorf("%w: read secret %s/%s: %w", nodeplan.ErrInput, s.machine.Namespace, name, err)
		}
		in.Secrets[name] = sec.Data
	}
	if nodeplan.NeedsControlPlaneVersion(cfg) {
		if in.ControlPlaneVersion, err = c.controlPlaneVersion(ctx, s.cluster); err != nil {
			return in, err
		}
	}
	if c.opts.OSImages != nil {
		if infra := desired.infra; infra != nil {
			if in.OS, err = c.opts.OSImages.ResolveOSImage(infra); err != nil {
				return in, fmt.Errorf("%w: resolve OS image of %s %s: %w", nodeplan.ErrInput, infra.GetKind(), infra.GetName(), err)
			}
		}
	}
	if in.Binaries, err = kubernetesBinaries(c.opts.Binaries, s.machine, s.node); err != nil {
		return in, err
	}
	if in.Gates, err = userGates(c.opts.Gates, s.machine); err != nil {
		return in, err
	}
	in.OSBackends = poolOSBackends(c.opts.NodeConfig, s.machine)
	// An image declared in the KubeadmConfig wins over the infrastructure's: it is
	// the one that can change in place on every provider.
	if declared, err := declaredOSImage(c.opts.DeclaredOSImages, cfg, s.machine); err != nil {
		return in, err
	} else if declared != nil {
		in.OS = declared
	}
	target := s.machine.Spec.Version
	if nodeplan.RoleOf(s.machine) == protocol.RoleControlPlane && target != "" && !nodeplan.SameVersion(target, in.Node.KubeletVersion) {
		nodes := &corev1.NodeList{}
		if err := s.wc.Client.List(ctx, nodes, client.HasLabels{controlPlaneNodeLabel}); err != nil {
			return in, fmt.Errorf("list control-plane nodes: %w", err)
		}
		for _, n := range nodes.Items {
			if n.Name != s.node.Name && nodeplan.SameVersion(target, n.Status.NodeInfo.KubeletVersion) {
				in.Node.ControlPlaneAtTarget = true
			}
		}
	} else {
		// Workers follow the control plane; their action is upgrade-node either way.
		in.Node.ControlPlaneAtTarget = true
	}
	return in, nil
}

func (c *Coordinator) controlPlaneVersion(ctx context.Context, cluster *clusterv1.Cluster) (string, error) {
	ref := cluster.Spec.ControlPlaneRef
	if !ref.IsDefined() {
		return "", nil
	}
	mapping, err := c.opts.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return "", fmt.Errorf("%w: map control plane kind %s: %w", nodeplan.ErrInput, ref.Kind, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ref.Name}, u); err != nil {
		return "", fmt.Errorf("%w: read control plane %s %s: %w", nodeplan.ErrInput, ref.Kind, ref.Name, err)
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "version")
	return v, nil
}

func toUnstructured(raw runtime.RawExtension) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	switch {
	case len(raw.Raw) > 0:
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			return nil, err
		}
	case raw.Object != nil:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(raw.Object)
		if err != nil {
			return nil, err
		}
		u.Object = m
	default:
		return nil, nil
	}
	return u, nil
}

// decodeKubeadmConfig returns the desired KubeadmConfig, or nil when the Machine is
// bootstrapped by something else (only version and OS are planned then).
func decodeKubeadmConfig(u *unstructured.Unstructured) (*bootstrapv1.KubeadmConfig, error) {
	if u == nil || u.GetKind() != "KubeadmConfig" {
		return nil, nil
	}
	if gv := u.GroupVersionKind().GroupVersion(); gv != bootstrapv1.GroupVersion {
		return nil, fmt.Errorf("%w: bootstrap config %s is %s, want %s", nodeplan.ErrInput, u.GetName(), gv, bootstrapv1.GroupVersion)
	}
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("%w: bootstrap config: %w", nodeplan.ErrInput, err)
	}
	cfg := &bootstrapv1.KubeadmConfig{}
	if err := json.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%w: bootstrap config %s: %w", nodeplan.ErrInput, u.GetName(), err)
	}
	return cfg, nil
}

// observe turns the scope into the pure Observation; now dates the update's start marker.
func observe(s *scope, now time.Time) Observation {
	ann := s.node.GetAnnotations()
	o := Observation{
		Node:           s.node.Name,
		PlanHash:       s.planHash,
		TargetVersion:  s.machine.Spec.Version,
		Published:      ann[inplacev1.DesiredPlanAnnotation],
		CurrentPlan:    ann[inplacev1.CurrentPlanAnnotation],
		KubeletVersion: s.node.Status.NodeInfo.KubeletVersion,
		Paused:         s.cluster.Annotations[inplacev1.PausedAnnotation] == "true",
		Started:        ann[inplacev1.UpdateStartedAnnotation] != "",
		NotPickedUp:    ann[inplacev1.PlanNotPickedUpAnnotation],
	}
	if started, err := time.Parse(time.RFC3339, ann[inplacev1.UpdateStartedAnnotation]); err == nil && now.After(started) {
		o.Elapsed = now.Sub(started)
	}
	if published, err := time.Parse(time.RFC3339, ann[inplacev1.PlanPublishedAnnotation]); err == nil && now.After(published) {
		o.SincePublished = now.Sub(published)
	}
	if v, ok := ann[inplacev1.StatusAnnotation]; ok && v != "" {
		st, err := protocol.DecodeStatus(v)
		if err != nil {
			o.StatusErr = err
		} else {
			o.Status = &st
		}
	}
	for _, cond := range s.node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			o.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return o
}
