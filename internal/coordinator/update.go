package coordinator

import (
	"context"
	"crypto/ecdh"
	"errors"

	corev1 "k8s.io/api/core/v1"
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

	plan     *protocol.NodePlan
	planHash string
	// desiredState is the identity of what the Machine's spec asks of the node
	// (protocol.NodePlan.DesiredState); planHash is the published plan's when
	// that plan carries out the same desired state (nodeplan.KeepPublished).
	desiredState string
	planJSON     []byte
	planSecret   *corev1.Secret // as found in the workload cluster; nil when absent
	// published is the hash of the plan the node's plan Secret holds ("" when none).
	published string
	// retried: the published plan is the one an operator's retry withdrew
	// (RetriedPlanAnnotation), so plan is built again, not kept.
	retried  bool
	agentKey *ecdh.PublicKey // the node's key, which the plan is sealed to (awaitAgentKey)

	drainBlocker string // the PDB that refused an eviction in this call (metrics.go)
	// pastDeadline is the phase whose deadline the update passed (watchdog.go).
	pastDeadline protocol.UpdatePhase
	// stagingAhead: a closed maintenance window holds the update and this call
	// asked for, or waited on, its staging (stageAhead).
	stagingAhead bool
	// stagedAhead: and the node has staged it; the update waits for the window.
	stagedAhead bool
	// cancelTooLate is the agent's phase when the Machine's cancel annotation came
	// after the agent began (fleet.go cancel); an answer in progress says so.
	cancelTooLate protocol.Phase
}

func (c *Coordinator) update(ctx context.Context, desired desiredObjects) Outcome {
	s, out, ok := c.loadScope(ctx, desired)
	mark(ctx, "read")
	if !ok {
		if out.offline && s != nil && !c.fromCache {
			return c.watchOffline(ctx, s, out)
		}
		return out
	}
	defer mark(ctx, "act")
	return c.act(ctx, s)
}

// act decides the next step from the loaded scope and takes it. On a view that
// reads from caches (fromCache, caches.go) it answers needsLive for anything but a
// quiet "in progress".
func (c *Coordinator) act(ctx context.Context, s *scope) (out Outcome) {
	defer func() {
		if s.cancelTooLate != "" && out.Kind == OutcomeInProgress {
			out.Message += cancelTooLateNote(s.cancelTooLate)
		}
	}()
	now := c.opts.Now()
	o := observe(s, now)
	deadlines := c.deadlines(s.stored)
	o.PickupTimeout = deadlines.Pickup
	d := Decide(o)
	in := WatchInput{Now: now, Record: protocol.DecodePhaseRecord(s.stored.Annotations[inplacev1.UpdatePhaseAnnotation]), Reachable: true,
		Plan: s.planHash, Phase: phaseOf(o, d), Seen: seenOf(o), Began: updateBegan(s.stored), Deadlines: deadlines}
	w := Watch(in)
	if w.Expired {
		d = expiredDecision(o, w.Record, deadlines)
		s.pastDeadline = w.Record.Phase
	}
	if c.fromCache && (w.Write || !quiet(s, o, d)) {
		return needsLive()
	}
	before := marksOf(s)
	defer func() {
		if !out.live {
			c.recordCall(s, before, o, out)
		}
	}()
	if d.Action == ActSucceed {
		if out, ok := c.guardDone(ctx, s); !ok {
			return out
		}
	}
	if out, held := c.fleetCheck(ctx, s, o, d); held {
		if s.stagedAhead {
			// Staged and held by the window: the record says so (UpdatePhaseStaged,
			// which has no deadline: waiting for the window is not staging), in the
			// write that ends the staging phase, so that the views see it from the
			// management cluster alone (machinestate.Staged).
			in.Phase = protocol.UpdatePhaseStaged
			w = Watch(in)
		}
		if s.stagingAhead && w.Write {
			// Staging ahead of the window is timed as any staging, so that a stalled
			// download fails before the window opens.
			c.recordPhase(ctx, s, w.Record)
		}
		return out
	}
	mark(ctx, "fleet")
	if w.Write {
		c.recordPhase(ctx, s, w.Record)
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
		if out, ok := c.protectFromRemediation(ctx, s, stepApply); !ok {
			return out
		}
		if c.fromCache && !alreadyPublished(s) {
			return needsLive()
		}
		if _, err := c.publish(ctx, s); err != nil {
			return c.workloadFailure(s, stepPublish, err)
		}
		return inProgress(d.RetryAfterSeconds, d.Message)
	case ActSucceed, ActFail:
		if err := c.finish(ctx, s); err != nil {
			return c.workloadFailure(s, stepVerify, err)
		}
		mark(ctx, "finish")
		if out, ok := c.liftRemediationHold(ctx, s); !ok {
			return out
		}
		mark(ctx, "liftHold")
		if d.Action == ActFail {
			c.report(ctx, s, d)
			mark(ctx, "report")
			return final(d.Cause, d.Message)
		}
		// Done does not wait for the Succeeded condition (laterreports.go).
		c.reportLater(ctx, s, d)
		return done(d.Message)
	case ActDegraded:
		// The node stays cordoned (and keeps our cordoned-by marker, so that a
		// successful retry after the repair uncordons it).
		if d.Cause == CauseDeadlineExceeded {
			c.markPastDeadline(ctx, s, d.Message)
		}
		if out, ok := c.releaseBrokenNode(ctx, s); !ok {
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
	mark(ctx, "ensureAgent")
	if out, ok := c.awaitAgentKey(s); !ok {
		return out
	}
	if out, ok := c.stage(ctx, s); !ok {
		return out
	}
	mark(ctx, "stage")
	if out, ok := c.protectFromRemediation(ctx, s, stepCordon); !ok {
		return out
	}
	mark(ctx, "protect")
	if err := c.cordon(ctx, s); err != nil {
		return c.workloadFailure(s, stepCordon, err)
	}
	mark(ctx, "cordon")
	if out, ok := c.drain(ctx, s); !ok {
		return out
	}
	mark(ctx, "drain")
	written, err := c.publish(ctx, s)
	mark(ctx, "publish")
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
