package coordinator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// CauseStagingFailed: the node could not fetch or verify what its plan needs (a
// digest mismatch, an unreachable source, binaries for another architecture, a
// full disk, an OS image its backend refused). The node was not cordoned and
// nothing it runs changed. A permanent cause (protocol.StagingStatus.Permanent)
// ends the update and counts against the failure budget; any other is asked
// again until the staging deadline (watchdog.go).
const CauseStagingFailed Cause = "StagingFailed"

// retryStaging is how soon CAPI should call again while a node stages.
const retryStaging = 2

// stage makes sure the node has staged the plan's artifacts before it is
// disturbed: it publishes the plan Secret and names the plan in the Node's
// StagePlanAnnotation (not DesiredPlanAnnotation: the agent only fetches), then
// waits for the agent's StagePhaseStaged. ok is true when the update may go on to
// cordon: the plan needs nothing staged, or the node staged it, or the plan is
// already published for applying.
func (c *Coordinator) stage(ctx context.Context, s *scope) (Outcome, bool) {
	ann := s.node.GetAnnotations()
	if !s.plan.NeedsStaging() || ann[inplacev1.DesiredPlanAnnotation] == s.planHash {
		return Outcome{}, true
	}
	d := StagingVerdict(s.node.Name, s.planHash, ann)
	switch d.Action {
	case ActSucceed:
		return Outcome{}, true
	case ActReportFailure:
		// A transient cause (a permanent one ends the update in Decide): clearing
		// the report and the deadline makes the agent try again, with a new
		// deadline, on the next request, until the coordinator's staging deadline.
		if err := c.patchNode(ctx, s, "clear the staging status of", func(_ *corev1.Node, a map[string]string) {
			delete(a, inplacev1.StagingStatusAnnotation)
			delete(a, inplacev1.StageTimeoutAnnotation)
		}); err != nil {
			return c.workloadFailure(s, stepAgent, err), false
		}
		c.opts.Recorder.Eventf(s.machine, nil, corev1.EventTypeWarning, inplacev1.EventStagingFailed, "Stage", "%s", d.Message)
		return retryable(d.Cause, d.Message), false
	}
	if _, err := c.writePlanSecret(ctx, s); err != nil {
		return c.workloadFailure(s, stepAgent, err), false
	}
	if err := c.patchNode(ctx, s, "ask for staging on", func(_ *corev1.Node, a map[string]string) {
		if staging := c.deadlines(s.stored).Staging; staging > 0 {
			// Bounds the agent's attempt only, on the node's clock; the coordinator
			// judges the staging deadline on its own (watchdog.go).
			a[inplacev1.StageTimeoutAnnotation] = protocol.EncodeStageTimeout(staging)
		}
		a[inplacev1.StagePlanAnnotation] = s.planHash
	}); err != nil {
		return c.workloadFailure(s, stepAgent, err), false
	}
	return inProgress(d.RetryAfterSeconds, d.Message), false
}

// StagingVerdict reads the node's staging report for a plan: ActSucceed when it
// is staged, ActReportFailure (CauseStagingFailed) when staging failed, ActWait
// with the progress otherwise. Pure.
func StagingVerdict(node, planHash string, ann map[string]string) Decision {
	wait := Decision{Action: ActWait, RetryAfterSeconds: retryStaging,
		Message: stepMsg(stepAgent, "asked the agent on node %s to stage plan %s before it is cordoned", node, short(planHash))}
	raw, ok := ann[inplacev1.StagingStatusAnnotation]
	if !ok || ann[inplacev1.StagePlanAnnotation] != planHash {
		return wait
	}
	st, err := protocol.DecodeStagingStatus(raw)
	if err != nil || st.PlanHash != planHash {
		return wait // about another plan, or garbled: the agent reports again
	}
	switch st.Phase {
	case protocol.StagePhaseStaged:
		return Decision{Action: ActSucceed, Message: fmt.Sprintf("node %s staged plan %s: %s", node, short(planHash), st.Message)}
	case protocol.StagePhaseFailed:
		return Decision{Action: ActReportFailure, Cause: CauseStagingFailed,
			Message: stepMsg(stepAgent, "node %s could not stage plan %s (%s, %s): %s; the node was not cordoned", node, short(planHash), st.Item, st.Reason, st.Message)}
	}
	wait.Message = stepMsg(stepAgent, "node %s is staging plan %s before it is cordoned: %s", node, short(planHash), st.Progress())
	return wait
}
