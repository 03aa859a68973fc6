package coordinator

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
)

// guardDone keeps "done" from resting on a report anyone could have written. The
// node's report (its status and current-plan annotations) is a Node field; only
// the agent policy (agentinstall.Guarded) keeps every identity but the node's own
// agent off it. With ManageAgents, which installs that policy, a Committed report
// is taken only if the policy and its binding are in force and have been since
// the plan was published. Otherwise the policy is applied again, the report is
// withdrawn (the agent reports again from its journal, or applies the plan it
// never applied) and the plan's publication is dated now, so that the report the
// agent writes next, under the policy, is taken. Without ManageAgents the
// operator installs the agent, and its policy with it (docs/safety.md).
func (c *Coordinator) guardDone(ctx context.Context, s *scope) (Outcome, bool) {
	if !c.opts.ManageAgents {
		return Outcome{}, true
	}
	published, _ := time.Parse(time.RFC3339, s.node.Annotations[inplacev1.PlanPublishedAnnotation])
	_, err := agentinstall.Guarded(ctx, s.wc.Client, published)
	var unguarded *agentinstall.UnguardedError
	switch {
	case err == nil:
		return Outcome{}, true
	case !errors.As(err, &unguarded):
		return c.workloadFailure(s, stepVerify, err), false
	}
	ctrl.LoggerFrom(ctx).Info("Not taking the node's report: the node annotation guard was not in force", "node", s.node.Name, "reason", unguarded.Reason)
	if err := agentinstall.EnsureGuard(ctx, s.wc.Client); err != nil {
		return c.workloadFailure(s, stepVerify, err), false
	}
	// The policy's creation is dated by the API server's clock, publication by
	// ours: the later of the two, so that a clock behind the server's does not
	// find the policy installed after the report it withdraws again and again.
	installed, err := agentinstall.Guarded(ctx, s.wc.Client, time.Time{})
	if err != nil {
		return c.workloadFailure(s, stepVerify, err), false
	}
	now := c.opts.Now()
	if installed.After(now) {
		now = installed
	}
	if err := c.patchNode(ctx, s, "withdraw the unguarded report of", func(_ *corev1.Node, ann map[string]string) {
		delete(ann, inplacev1.StatusAnnotation)
		delete(ann, inplacev1.StateAnnotation)
		delete(ann, inplacev1.CurrentPlanAnnotation)
		ann[inplacev1.PlanPublishedAnnotation] = now.UTC().Format(time.RFC3339)
	}); err != nil {
		return c.workloadFailure(s, stepVerify, err), false
	}
	return inProgress(waitRetry(0), stepMsg(stepVerify, "node %s reports plan %s committed, but %v: the policy was applied again and the report withdrawn; waiting for the agent to report again",
		s.node.Name, short(s.planHash), unguarded)), false
}
