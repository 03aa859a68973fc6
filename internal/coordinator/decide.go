package coordinator

import (
	"fmt"
	"strings"
	"time"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The steps of one node update, as counted in progress messages.
const (
	stepAgent = iota + 1
	stepCordon
	stepDrain
	stepPublish
	stepApply
	stepVerify
	totalSteps = stepVerify
)

// Retry intervals, in seconds, by what the coordinator waits for.
const (
	retryDrain       = 2
	retryUnreachable = 10
	retryNoNodeRef   = 10
	retryPaused      = 15
)

// Observation is what one call saw of a node update; it is built by the shell from
// API objects only, so that a restarted coordinator decides exactly as before.
type Observation struct {
	Node     string
	PlanHash string
	// TargetVersion is the Machine's spec.version; empty skips the version gate.
	TargetVersion string
	// DesiredState is the identity of what the Machine's spec asks of the node
	// (protocol.NodePlan.DesiredState): a Committed status counts as done only
	// for it.
	DesiredState string
	// Published is the node's desired-plan annotation.
	Published string
	// CurrentPlan is the node's current-plan annotation: shown, never taken as
	// done (any writer of the Node can set it).
	CurrentPlan string
	// Status is the agent's decoded status; nil when absent. StatusErr is set when
	// the annotation exists but does not decode.
	Status    *protocol.NodeStatus
	StatusErr error

	KubeletVersion string
	Ready          bool
	// Paused is the Cluster's paused opt-in; it holds back updates not yet started.
	Paused bool
	// Started is true when the node carries our update-started marker.
	Started bool
	// Elapsed is the time since the update started (the marker's age); zero when
	// unknown. It only sets how soon CAPI calls again, never what is decided.
	Elapsed time.Duration
	// NeedsStaging: the plan has artifacts to stage and is not published yet.
	NeedsStaging bool
	// Staging is the node's staging report for this plan; nil when none.
	Staging *protocol.StagingStatus
	// PickupTimeout is the pick-up deadline, for messages (the watchdog judges it).
	PickupTimeout time.Duration
	// NotPickedUp is the plan hash the coordinator gave up on because its agent never
	// picked it up (PlanNotPickedUpAnnotation).
	NotPickedUp string
}

// waitRetry is how soon CAPI should call again while the agent works or the node
// settles. Most node updates finish in seconds once the agent has the plan, and CAPI
// does not call back before retryAfterSeconds: a fixed 5 s would make every short
// update wait for it (measured: the rollout's whole overhead against the floor was
// this wait). Long updates back off so that a kubeadm upgrade of minutes does not
// cost six management reads a second per node.
func waitRetry(elapsed time.Duration) int32 {
	switch {
	case elapsed < 30*time.Second:
		return 1
	case elapsed < 2*time.Minute:
		return 2
	default:
		return 5
	}
}

// Action is what the shell must do next.
type Action int

const (
	// ActStart: ensure the agent, cordon, drain, publish (each step idempotent).
	ActStart Action = iota
	// ActAwaitAgent: the plan is published; keep it published and wait.
	ActAwaitAgent
	// ActWait: nothing to write, answer in progress.
	ActWait
	// ActSucceed: uncordon what we cordoned, record the event, answer done.
	ActSucceed
	// ActFail: uncordon what we cordoned, record the event, answer Failure.
	ActFail
	// ActReportFailure: answer Failure and touch nothing (the agent may be mid-work).
	ActReportFailure
	// ActDegraded: the node is broken (its rollback failed, or the agent cannot tell
	// what it did): keep it cordoned, say Degraded on the Machine, answer Failure.
	ActDegraded
	// ActAbandon: the agent never picked up the plan: withdraw it, uncordon what we
	// cordoned, mark the plan as not picked up, answer Failure.
	ActAbandon
)

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// Message is the deterministic text for the hook response.
	Message string
	// RetryAfterSeconds applies to ActWait and ActAwaitAgent.
	RetryAfterSeconds int32
	// EventReason names the event to record when the update ends (ActSucceed,
	// ActFail, ActDegraded, ActAbandon).
	EventReason string
	// Cause is the typed cause of a failure (ActFail, ActReportFailure, ActDegraded,
	// ActAbandon); callers decide on it, never on Message.
	Cause Cause
}

// stepUnknown is the step of a message written before the node was read: the
// coordinator keeps no state between calls, so while the workload cluster's API
// server is down (a single control plane's restarts during its own upgrade, when
// the node is at step 5) it cannot say which step the update is at, and must not
// claim step 1.
const stepUnknown = 0

func stepMsg(step int, format string, args ...any) string {
	if step == stepUnknown {
		return fmt.Sprintf(format, args...)
	}
	return fmt.Sprintf("step %d/%d: ", step, totalSteps) + fmt.Sprintf(format, args...)
}

// Decide maps an observation to the next action. It is the whole update protocol as
// seen from the coordinator, and pure.
func Decide(o Observation) Decision {
	if o.StatusErr != nil {
		return Decision{Action: ActReportFailure, Cause: CauseInvalidStatus, Message: fmt.Sprintf("node %s: the agent's status annotation is invalid: %v", o.Node, o.StatusErr)}
	}
	st := o.Status
	if st != nil && st.PlanHash == o.PlanHash {
		switch st.Phase {
		case protocol.PhaseCommitted:
			if d, ok := committed(o, st); ok {
				return d
			}
		case protocol.PhaseRolledBack, protocol.PhaseFailed:
			// Stays a failure for as long as the agent reports it, even if the plan
			// was withdrawn: a stale failure must never be mistaken for progress. To
			// retry the same plan, an operator removes both the desired-plan and the
			// status annotation (the agent forgets a withdrawn failed plan).
			return failed(o, st)
		default:
			return Decision{Action: ActAwaitAgent, RetryAfterSeconds: waitRetry(o.Elapsed), Message: stepMsg(stepApply, "waiting for the agent on node %s to apply plan %s: %s", o.Node, short(o.PlanHash), agentProgress(st))}
		}
	}
	if st != nil && st.PlanHash != o.PlanHash && st.Phase == protocol.PhaseCommitted && o.DesiredState != "" && st.DesiredState == o.DesiredState {
		// Another build of the same desired state (another replica's policy, an
		// older credential) was committed: that is what the spec asks for.
		if d, ok := committed(o, st); ok {
			return d
		}
	}
	if o.NotPickedUp == o.PlanHash && o.PlanHash != "" {
		// Stays a failure until an operator removes the marker (or the spec changes).
		return Decision{Action: ActAbandon, Cause: CausePlanNotPickedUp, EventReason: inplacev1.EventPlanNotPickedUp,
			Message: fmt.Sprintf("node %s: the agent did not pick up plan %s within %s; the plan was withdrawn and the node put back in service (remove annotation %s from the node to retry)",
				o.Node, short(o.PlanHash), o.PickupTimeout, inplacev1.PlanNotPickedUpAnnotation)}
	}
	if o.Published == o.PlanHash {
		return Decision{Action: ActAwaitAgent, RetryAfterSeconds: waitRetry(o.Elapsed), Message: stepMsg(stepApply, "waiting for the agent on node %s to pick up plan %s", o.Node, short(o.PlanHash))}
	}
	if o.Published != "" && st != nil && st.PlanHash == o.Published && !st.Phase.Terminal() {
		// Replacing a plan under a working agent could leave the node half-changed.
		return Decision{Action: ActWait, RetryAfterSeconds: waitRetry(o.Elapsed), Message: stepMsg(stepPublish, "waiting for the agent on node %s to finish plan %s before publishing plan %s", o.Node, short(o.Published), short(o.PlanHash))}
	}
	if o.NeedsStaging && o.Staging != nil && o.Staging.Permanent() {
		// Staging again would fetch the same wrong bytes: the update fails and
		// counts, with the node untouched.
		return Decision{Action: ActFail, Cause: CauseStagingFailed, EventReason: inplacev1.EventStagingFailed,
			Message: stepMsg(stepAgent, "node %s could not stage plan %s (%s, %s): %s; the node was not cordoned (annotate the Machine with %s to try again)",
				o.Node, short(o.PlanHash), o.Staging.Item, o.Staging.Reason, o.Staging.Message, inplacev1.RetryAnnotation)}
	}
	if o.Paused && !o.Started {
		return Decision{Action: ActWait, RetryAfterSeconds: retryPaused, Message: stepMsg(stepAgent, "cluster is paused for in-place updates; node %s not started", o.Node)}
	}
	return Decision{Action: ActStart}
}

// committed decides on a Committed status: done (after the outside gates) only
// when the node is pointed at the committed plan, or at none, so no other plan
// is on its way, and the commit was for the desired state the Machine's spec
// asks for. ok is false when another plan is published: the caller goes on as
// for any plan not yet committed. An agent from before desired-state identities
// reports none; its commit of this very plan hash is taken as is.
func committed(o Observation, st *protocol.NodeStatus) (Decision, bool) {
	if o.Published != "" && o.Published != st.PlanHash {
		return Decision{}, false
	}
	if st.DesiredState != "" && st.DesiredState != o.DesiredState {
		return Decision{Action: ActReportFailure, Cause: CauseInvalidStatus,
			Message: fmt.Sprintf("node %s: the agent reports plan %s committed for desired state %s, but the Machine's spec asks for %s", o.Node, short(st.PlanHash), short(st.DesiredState), short(o.DesiredState))}, true
	}
	return gates(o), true
}

func gates(o Observation) Decision {
	if o.TargetVersion != "" && !nodeplan.SameVersion(o.TargetVersion, o.KubeletVersion) {
		return Decision{Action: ActWait, RetryAfterSeconds: waitRetry(o.Elapsed), Message: stepMsg(stepVerify, "waiting for node %s to report kubelet %s (reports %q)", o.Node, o.TargetVersion, o.KubeletVersion)}
	}
	if !o.Ready {
		return Decision{Action: ActWait, RetryAfterSeconds: waitRetry(o.Elapsed), Message: stepMsg(stepVerify, "waiting for node %s to be Ready", o.Node)}
	}
	return Decision{Action: ActSucceed, EventReason: inplacev1.EventUpdateSucceeded, Message: fmt.Sprintf("node %s runs plan %s", o.Node, short(o.PlanHash))}
}

func withNotPickedUp(o Observation) Observation {
	o.NotPickedUp = o.PlanHash
	return o
}

func failed(o Observation, st *protocol.NodeStatus) Decision {
	cause := strings.TrimSpace(strings.Trim(st.Reason+": "+st.Message, ": "))
	if cause == "" {
		cause = "no cause reported"
	}
	if st.Broken() {
		// Never put back in service: its rollback failed or the agent cannot tell
		// what it did.
		return Decision{Action: ActDegraded, Cause: CauseDegraded, EventReason: inplacev1.EventNodeDegraded,
			Message: fmt.Sprintf("node %s is degraded: the agent failed plan %s and the node needs manual repair: %s; it stays cordoned", o.Node, short(o.PlanHash), cause)}
	}
	verb, reason, typed := "failed", inplacev1.EventUpdateFailed, CauseAgentFailed
	if st.Phase == protocol.PhaseRolledBack {
		verb, reason, typed = "rolled back", inplacev1.EventUpdateRolledBack, CauseRolledBack
	}
	return Decision{Action: ActFail, Cause: typed, EventReason: reason, Message: fmt.Sprintf("node %s: the agent %s plan %s: %s", o.Node, verb, short(o.PlanHash), cause)}
}

func agentProgress(st *protocol.NodeStatus) string {
	s := string(st.Phase)
	if st.Steps > 0 {
		s += fmt.Sprintf(" (%d/%d", st.Step, st.Steps)
		if st.Action != "" {
			s += " " + st.Action
		}
		s += ")"
	}
	if st.Reason == protocol.ReasonWaitingForEtcdQuorum {
		// The agent holds the plan before touching the node: say who holds it.
		s += ": " + st.Message
	}
	return s
}

// short keeps messages readable; 12 hex digits are unique enough for humans.
func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// DrainVerdict turns one drain attempt into a decision: done (ok), still in progress,
// or Failure once the drain has been blocked for longer than the timeout. The node
// stays cordoned on Failure and every later call tries again: CAPI retries Failure.
func DrainVerdict(node string, res drain.Result, started, now time.Time, timeout time.Duration) (Decision, bool) {
	if res.Done {
		return Decision{}, true
	}
	if timeout > 0 && !started.IsZero() && now.Sub(started) > timeout {
		return Decision{Action: ActReportFailure, Cause: CauseDrainTimeout, Message: stepMsg(stepDrain, "draining node %s did not finish within %s: %s", node, timeout, res.Summary())}, false
	}
	return Decision{Action: ActWait, RetryAfterSeconds: retryDrain, Message: stepMsg(stepDrain, "draining node %s: %s", node, res.Summary())}, false
}
