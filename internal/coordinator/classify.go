package coordinator

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
)

// workloadFailure answers an error talking to the workload cluster: in progress when
// the cluster may come back (its only API server restarts during a control-plane
// upgrade), Failure when the cluster answered and refused.
func (c *Coordinator) workloadFailure(s *scope, step int, err error) Outcome {
	if c.fromCache {
		// A cache's error (not synced, a kind it does not hold) says nothing about
		// the cluster: the live reads answer.
		return needsLive()
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Another replica of the extension (every replica answers hooks) or another
		// writer got there first; the next call sees its result.
		return inProgress(retryDrain, stepMsg(step, "retrying after a concurrent change: %v", err))
	}
	if unreachable(err) {
		c.opts.Clusters.Invalidate(s.clusterKey)
		out := inProgress(retryUnreachable, stepMsg(step, "waiting for the API server of cluster %s: %v", s.clusterKey.Name, err))
		out.offline = true
		return out
	}
	logRefusal(err)
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
