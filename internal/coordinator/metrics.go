package coordinator

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// UpdateMetrics records what one UpdateMachine call learned about its node's
// update (PrometheusMetrics implements it, updatemetrics.go); nil records nothing.
// The coordinator keeps no state, so every transition is read off the node's
// annotations before and after the call: a transition is recorded by the one call
// that made it, whichever replica of the extension answered it.
type UpdateMetrics interface {
	RecordCall(r CallRecord)
}

// Node update outcomes, the outcome label of the update metrics.
const (
	OutcomeLabelDone        = "done"
	OutcomeLabelRolledBack  = "rolled_back"
	OutcomeLabelFailed      = "failed"
	OutcomeLabelNotPickedUp = "not_picked_up"
	OutcomeLabelCancelled   = "cancelled"
)

// Steps of a node update timed from outside the node, the step label of the
// update metrics. StepLabelDrain runs from the cordon to the drained node (the
// cordon itself is one write inside it); StepLabelApply from the plan's
// publication to the agent's final report (the agent's stage of the OS image,
// apply, reboot, verify and commit, which the agent times one by one in its own
// metrics); StepLabelVerify from the agent's commit to the outside gates passing
// (kubelet version, Ready).
const (
	StepLabelDrain  = "drain"
	StepLabelApply  = "apply"
	StepLabelVerify = "verify"
)

// Rollout states of a cluster, the state label of the per-cluster gauge.
const (
	ClusterStateActive       = "active"
	ClusterStatePaused       = "paused"
	ClusterStateHalted       = "halted"
	ClusterStateWindowClosed = "window_closed"
	ClusterStateSoaking      = "soaking"
)

// CallRecord is what one call saw and did, in label values from fixed sets plus
// the names of the cluster ("namespace/name"), the node and a blocking PDB.
type CallRecord struct {
	Cluster, Node string
	// ClusterState is the cluster's rollout state after the call ("" unknown).
	ClusterState string
	// InFlight: the node's update has started (cordon) and not ended after the call.
	InFlight bool
	// Started is when the update started (zero when not InFlight).
	Started time.Time
	// CordonedByUs: the node is cordoned by the coordinator after the call.
	CordonedByUs bool
	// Degraded: the node's rollback failed or its journal is corrupt; it stays cordoned.
	Degraded bool
	// PastDeadline is the phase whose deadline the update passed (watchdog.go).
	PastDeadline string
	// RemediationHeld: the node is Degraded or past a deadline and the policy keeps
	// its Machine's remediation hold (Deadlines.KeepRemediationHold).
	RemediationHeld bool
	// DrainBlockedBy is the PodDisruptionBudget ("namespace/name") that refused an
	// eviction in this call; DrainBlockedFor how long the drain has run.
	DrainBlockedBy  string
	DrainBlockedFor time.Duration
	// Cordoned, Published: this call cordoned the node, published its plan.
	Cordoned, Published bool
	// Outcome is set when this call ended the update (an Outcome* label), with
	// Took the time since it started.
	Outcome string
	Took    time.Duration
	// Steps are the steps that ended in this call, with their durations.
	Steps map[string]time.Duration
}

// nodeMarks are the annotations of a node that the metrics compare before and
// after a call.
type nodeMarks struct {
	cordonedByUs bool
	started      time.Time
	startedSet   bool
	published    bool
	publishedAt  time.Time
}

func marksOf(s *scope) nodeMarks {
	ann := s.node.GetAnnotations()
	m := nodeMarks{
		cordonedByUs: ann[inplacev1.CordonedByAnnotation] == cordonedByValue,
		startedSet:   ann[inplacev1.UpdateStartedAnnotation] != "",
		published:    s.planHash != "" && ann[inplacev1.DesiredPlanAnnotation] == s.planHash && ann[inplacev1.PlanPublishedAnnotation] != "",
	}
	m.started, _ = time.Parse(time.RFC3339, ann[inplacev1.UpdateStartedAnnotation])
	m.publishedAt, _ = time.Parse(time.RFC3339, ann[inplacev1.PlanPublishedAnnotation])
	return m
}

// recordCall hands the metrics what the call changed; before are the node's marks
// as loaded, o the observation Decide saw, out the answer.
func (c *Coordinator) recordCall(s *scope, before nodeMarks, o Observation, out Outcome) {
	if c.opts.Metrics == nil || s == nil || s.node == nil {
		return
	}
	c.opts.Metrics.RecordCall(callRecord(s, before, marksOf(s), o, out, c.opts.Now()))
}

// callRecord is the pure comparison behind recordCall.
func callRecord(s *scope, before, after nodeMarks, o Observation, out Outcome, now time.Time) CallRecord {
	r := CallRecord{
		Cluster:      s.clusterKey.String(),
		Node:         s.node.Name,
		ClusterState: clusterState(s),
		InFlight:     after.startedSet,
		CordonedByUs: after.cordonedByUs,
		Degraded:     out.Cause == CauseDegraded,
		Cordoned:     after.cordonedByUs && !before.cordonedByUs,
		Published:    after.published && !before.published,
		Steps:        map[string]time.Duration{},
	}
	if out.Cause == CauseDeadlineExceeded {
		r.PastDeadline = string(s.pastDeadline)
	}
	r.RemediationHeld = (out.Cause == CauseDegraded || out.Cause == CauseDeadlineExceeded) && remediationHeld(s)
	if r.InFlight {
		r.Started = after.started
	}
	if s.drainBlocker != "" {
		r.DrainBlockedBy, r.DrainBlockedFor = s.drainBlocker, since(after.started, now)
	}
	if r.Published && after.startedSet {
		r.Steps[StepLabelDrain] = since(after.started, now)
	}
	if before.startedSet && !after.startedSet {
		r.Outcome, r.Took = outcomeLabel(out), since(before.started, now)
		if st := o.Status; st != nil && st.Phase.Terminal() && !before.publishedAt.IsZero() && st.UpdatedAt.After(before.publishedAt) {
			r.Steps[StepLabelApply] = st.UpdatedAt.Sub(before.publishedAt)
			if r.Outcome == OutcomeLabelDone && st.Phase == protocol.PhaseCommitted {
				r.Steps[StepLabelVerify] = since(st.UpdatedAt, now)
			}
		}
	}
	return r
}

func since(t, now time.Time) time.Duration {
	if t.IsZero() || now.Before(t) {
		return 0
	}
	return now.Sub(t)
}

func outcomeLabel(out Outcome) string {
	switch {
	case out.Kind == OutcomeDone:
		return OutcomeLabelDone
	case out.Cause == CauseRolledBack:
		return OutcomeLabelRolledBack
	case out.Cause == CausePlanNotPickedUp:
		return OutcomeLabelNotPickedUp
	case out.Cause == CauseCancelled:
		return OutcomeLabelCancelled
	}
	return OutcomeLabelFailed
}

// clusterState reads the rollout state of the call's cluster: the pause
// annotation, else the fleet controls' InPlaceUpdate condition (fleet.go).
func clusterState(s *scope) string {
	if s.cluster == nil {
		return ""
	}
	if s.cluster.Annotations[inplacev1.PausedAnnotation] == "true" {
		return ClusterStatePaused
	}
	cond := meta.FindStatusCondition(s.cluster.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	if cond == nil {
		return ClusterStateActive
	}
	switch cond.Reason {
	case inplacev1.ReasonPaused:
		return ClusterStatePaused
	case inplacev1.ReasonHalted:
		return ClusterStateHalted
	case inplacev1.ReasonWindowClosed:
		return ClusterStateWindowClosed
	case inplacev1.ReasonSoaking:
		return ClusterStateSoaking
	}
	return ClusterStateActive
}

// blockingPDB names the first PodDisruptionBudget that refused an eviction.
func blockingPDB(res drain.Result) string {
	for _, b := range res.Blockers {
		if b.PDB != "" {
			return b.PDB
		}
	}
	return ""
}
