package coordinator

import (
	"context"
	"fmt"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

// stageAhead answers an update that a closed maintenance window holds, and
// stages its plan meanwhile: the node downloads and verifies what the plan needs
// while it serves, uncordoned and unchanged, so that the window is spent on the
// switch alone and a bad digest, a full disk or an unreachable source is known
// before it opens. The update stays held: the answer is the hold's, with the
// staging's progress or end in front of it. A transient staging failure is
// answered as stage answers it (and asked again); a permanent one ended the
// update in Decide already, before the gate.
//
// Staging begins only inside one of the pool's download windows (none: any
// time); a node once asked for a plan stages it to the end, under the staging
// deadline, since its agent cannot be stopped half-way. A plan with nothing to
// stage is held as before, touching nothing.
func (c *Coordinator) stageAhead(ctx context.Context, s *scope, pool fleet.Pool, hold fleet.Hold) Outcome {
	retry := int32(hold.RetryAfter / time.Second)
	if !s.plan.NeedsStaging() {
		return inProgress(retry, stepMsg(stepAgent, "%s", hold.Message))
	}
	if s.node.Annotations[inplacev1.StagePlanAnnotation] != s.planHash {
		if why := c.downloadWindowClosed(s, pool); why != "" {
			return inProgress(retry, stepMsg(stepAgent, "waiting for a download window to stage plan %s: %s; %s", short(s.planHash), why, hold.Message))
		}
	}
	if out, ok := c.ensureAgent(ctx, s, stepAgent); !ok {
		return out
	}
	if out, ok := c.awaitAgentKey(s); !ok {
		return out
	}
	s.stagingAhead = true
	out, staged := c.stage(ctx, s)
	switch {
	case staged:
		s.stagedAhead = true
		return inProgress(retry, stepMsg(stepAgent, "node %s staged plan %s; %s", s.node.Name, short(s.planHash), hold.Message))
	case out.Kind == OutcomeInProgress:
		out.Message += "; " + hold.Message
	}
	return out
}

// downloadWindowClosed says why staging may not begin now ("" when it may): no
// download window is open, or the windows do not parse (a broken schedule holds
// the download, as a broken maintenance schedule holds the update).
func (c *Coordinator) downloadWindowClosed(s *scope, pool fleet.Pool) string {
	sched, _, err := clusterDownloadWindows(pool, s.cluster)
	if err != nil {
		return fmt.Sprintf("the download windows do not parse: %v", err)
	}
	v := sched.At(c.opts.Now(), 0)
	if v.Start {
		return ""
	}
	if v.NextOpening.IsZero() {
		return "the download window is closed; no opening within a week"
	}
	return "the download window is closed; next opening " + v.NextOpening.UTC().Format(time.RFC3339)
}

// clusterDownloadWindows is fleet.PoolWindows for the download windows of pool
// in cluster: the Cluster's annotation, when set, replaces the policy's.
func clusterDownloadWindows(pool fleet.Pool, cluster *clusterv1.Cluster) (fleet.Schedule, bool, error) {
	v, annotated := cluster.Annotations[inplacev1.DownloadWindowsAnnotation]
	return fleet.PoolWindows(pool.DownloadWindows, v, annotated)
}
