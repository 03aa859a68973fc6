package coordinator

import (
	"fmt"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The watchdog: every phase of a node update has a deadline (the policy's
// deadlines section), so that an agent that never comes back (a kubelet or OS
// image that cannot run pods after a reboot, a full journal disk, a single control
// plane whose manifests a power cut left parked) cannot keep a node cordoned and
// out of MachineHealthCheck's reach forever.
//
// Time is the coordinator's own: each phase is dated when a call first saw it,
// on the coordinator's clock, in the Machine's UpdatePhaseAnnotation (management
// cluster), never from a time the node can write (its annotations, the agent's
// UpdatedAt). Watch is pure: the call passes now in, as raft's core is passed ticks.

// CauseDeadlineExceeded: a phase of the node update passed its deadline. Before
// cordon (staging) the node is untouched; after it (applying, rebooting,
// verifying) the node stays cordoned with the cause on it and the Machine.
const CauseDeadlineExceeded Cause = "DeadlineExceeded"

// pausesOnOutage reports whether the phase's clock stops while the coordinator
// cannot reach the workload API: in staging and pick-up the node can only answer
// through that API, so an outage is not its delay. From applying on, the node is
// being changed by the update and an API that does not come back (a single
// control plane that cannot start its own API server) is what the deadline is for.
func pausesOnOutage(p protocol.UpdatePhase) bool {
	return p == protocol.UpdatePhaseStaging || p == protocol.UpdatePhasePickup
}

// Deadlines bound the phases of a node update; a zero phase deadline means none.
type Deadlines struct {
	Staging, Pickup, Applying, Rebooting, Verifying time.Duration
	// KeepRemediationHold keeps Cluster API's skip-remediation on a Machine whose
	// node is left cordoned past a deadline or Degraded (an alert says so);
	// otherwise the hold is released so that MachineHealthCheck can act.
	KeepRemediationHold bool
}

// DeadlinesFromPolicy maps the policy's deadlines section to Deadlines.
func DeadlinesFromPolicy(d policy.Deadlines) Deadlines {
	return Deadlines{Staging: d.Staging, Pickup: d.Pickup, Applying: d.Applying, Rebooting: d.Rebooting,
		Verifying: d.Verifying, KeepRemediationHold: d.KeepRemediationHold}
}

// DeadlinesResolver returns the deadlines of a Machine's pool (*policy.Policy).
type DeadlinesResolver interface {
	DeadlinesFor(namespace string, machineLabels map[string]string) policy.Deadlines
}

var _ DeadlinesResolver = (*policy.Policy)(nil)

// deadlines returns the deadlines of the Machine's pool (Options.PoolDeadlines),
// else Options.Deadlines.
func (c *Coordinator) deadlines(m *clusterv1.Machine) Deadlines {
	if c.opts.PoolDeadlines == nil || m == nil {
		return c.opts.Deadlines
	}
	return DeadlinesFromPolicy(c.opts.PoolDeadlines.DeadlinesFor(m.Namespace, m.Labels)).withDefaults(c.opts.Deadlines)
}

// withDefaults fills the zero phase deadlines of d from def.
func (d Deadlines) withDefaults(def Deadlines) Deadlines {
	for _, f := range []struct{ v, def *time.Duration }{
		{&d.Staging, &def.Staging}, {&d.Pickup, &def.Pickup}, {&d.Applying, &def.Applying},
		{&d.Rebooting, &def.Rebooting}, {&d.Verifying, &def.Verifying},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return d
}

func (d Deadlines) negative() bool {
	return d.Staging < 0 || d.Pickup < 0 || d.Applying < 0 || d.Rebooting < 0 || d.Verifying < 0
}

func (d Deadlines) of(p protocol.UpdatePhase) time.Duration {
	switch p {
	case protocol.UpdatePhaseStaging:
		return d.Staging
	case protocol.UpdatePhasePickup:
		return d.Pickup
	case protocol.UpdatePhaseApplying:
		return d.Applying
	case protocol.UpdatePhaseRebooting:
		return d.Rebooting
	case protocol.UpdatePhaseVerifying:
		return d.Verifying
	}
	return 0
}

// phaseQuietWindow is how long after an update began (Cluster API's Updating
// condition, else the first recorded phase) no phase is written: most updates end
// within it (a files-only plan in well under a second), and each write of the
// Machine wakes Cluster API's controllers mid-rollout. A phase entered within it
// is dated by the first call after it, so a deadline can only fire up to this
// much later, never earlier.
const phaseQuietWindow = 30 * time.Second

// outageGrace is the least time a paused phase has left when the workload API
// answers again: the agent's watch relists after the outage before it can answer.
const outageGrace = time.Minute

// maxSeen bounds what the record keeps of the node's last report.
const maxSeen = 256

// WatchInput is what Watch judges.
type WatchInput struct {
	Now    time.Time
	Record protocol.PhaseRecord
	// Reachable: this call read the node from the workload API. When false, Plan,
	// Phase and Seen are unknown and the record is judged as it stands.
	Reachable bool
	Plan      string
	// Phase is the timed phase the call observed; "" when none (not started, held
	// or over).
	Phase protocol.UpdatePhase
	// Seen is what the node reports now, in a few words.
	Seen string
	// Began is when Cluster API began the update (the Machine's Updating condition,
	// management side); zero when unknown (the single-node path).
	Began     time.Time
	Deadlines Deadlines
}

// WatchResult is Watch's verdict.
type WatchResult struct {
	// Record is the record after this call; Write says it must be stored.
	Record protocol.PhaseRecord
	Write  bool
	// Expired: the update is past the deadline of Record.Phase (now or earlier).
	Expired bool
}

// Watch advances the update's clock by one call and judges it. Pure.
func Watch(in WatchInput) WatchResult {
	rec := in.Record
	if !in.Reachable {
		return watchUnreachable(in)
	}
	if rec.Plan != in.Plan {
		rec = protocol.PhaseRecord{} // another plan's
	}
	if !rec.Expired.IsZero() {
		// Sticky while the update runs on; a plan the node ends itself (a late
		// commit, a rollback) is answered by the node's own verdict.
		return WatchResult{Record: rec, Expired: in.Phase != ""}
	}
	if in.Phase == "" {
		return WatchResult{Record: rec}
	}
	if rec.Plan == "" {
		start := in.Now
		if !in.Began.IsZero() && !in.Began.After(in.Now) {
			if in.Now.Sub(in.Began) < phaseQuietWindow {
				return WatchResult{} // most updates end before they are dated
			}
			start = in.Began
		}
		rec = protocol.PhaseRecord{Plan: in.Plan, Phase: in.Phase, Start: start, Since: in.Now, Seen: bounded(in.Seen)}
		return WatchResult{Record: rec, Write: true}
	}
	write := false
	if !rec.Unreachable.IsZero() {
		// Back from an outage: a paused phase's clock moves on by the outage.
		if pausesOnOutage(rec.Phase) && in.Now.After(rec.Unreachable) {
			rec.Since = rec.Since.Add(in.Now.Sub(rec.Unreachable))
			if d := in.Deadlines.of(rec.Phase); d > 0 {
				if latest := in.Now.Add(min(outageGrace, d) - d); rec.Since.Before(latest) {
					rec.Since = latest
				}
			}
		}
		rec.Unreachable, write = time.Time{}, true
	}
	if in.Phase != rec.Phase {
		if in.Now.Sub(rec.Start) < phaseQuietWindow {
			// Not dated yet: this phase cannot expire before a later call dates it.
			return WatchResult{Record: rec, Write: write}
		}
		rec.Phase, rec.Since, rec.Seen = in.Phase, in.Now, bounded(in.Seen)
		return WatchResult{Record: rec, Write: true}
	}
	if d := in.Deadlines.of(rec.Phase); d > 0 && in.Now.Sub(rec.Since) > d {
		if rec.Phase == protocol.UpdatePhasePickup {
			// The node's not-picked-up marker holds this verdict: the withdrawal
			// races the agent's claim, and a claim that wins starts the applying
			// phase's clock.
			return WatchResult{Record: rec, Write: write, Expired: true}
		}
		rec.Expired, rec.Seen = in.Now, bounded(in.Seen)
		return WatchResult{Record: rec, Write: true, Expired: true}
	}
	return WatchResult{Record: rec, Write: write}
}

// watchUnreachable judges the record while the workload API does not answer.
func watchUnreachable(in WatchInput) WatchResult {
	rec := in.Record
	switch {
	case rec.Plan == "":
		return WatchResult{}
	case !rec.Expired.IsZero():
		return WatchResult{Record: rec, Expired: true}
	case pausesOnOutage(rec.Phase):
		if rec.Unreachable.IsZero() {
			rec.Unreachable = in.Now
			return WatchResult{Record: rec, Write: true}
		}
		return WatchResult{Record: rec}
	}
	if d := in.Deadlines.of(rec.Phase); d > 0 && in.Now.Sub(rec.Since) > d {
		rec.Expired = in.Now
		rec.Seen = bounded(rec.Seen + "; the workload cluster's API server does not answer")
		return WatchResult{Record: rec, Write: true, Expired: true}
	}
	return WatchResult{Record: rec}
}

// recordCause is the human cause of an expired record: which phase, since when,
// for how long it was allowed and what was last seen of the node.
func recordCause(r protocol.PhaseRecord, d Deadlines) string {
	seen := r.Seen
	if seen == "" {
		seen = "nothing"
	}
	return fmt.Sprintf("phase %s of plan %s passed its deadline of %s (in it since %s, judged at %s); last seen: %s",
		r.Phase, short(r.Plan), d.of(r.Phase), r.Since.UTC().Format(time.RFC3339), r.Expired.UTC().Format(time.RFC3339), seen)
}

// bounded is s fit for the record: one line of at most maxSeen bytes.
func bounded(s string) string { return protocol.BoundText(s, maxSeen) }

// phaseOf is the timed phase of the update as a call sees it: from Decide's
// verdict d on the observation o. "" for an update not started, held or over.
func phaseOf(o Observation, d Decision) protocol.UpdatePhase {
	st := o.Status
	own := st != nil && st.PlanHash == o.PlanHash
	switch d.Action {
	case ActStart:
		if o.NeedsStaging && (o.Staging == nil || o.Staging.Phase != protocol.StagePhaseStaged) {
			return protocol.UpdatePhaseStaging
		}
		return protocol.UpdatePhaseDraining
	case ActAwaitAgent:
		if !own {
			return protocol.UpdatePhasePickup
		}
		switch st.Phase {
		case protocol.PhaseRebooting:
			return protocol.UpdatePhaseRebooting
		case protocol.PhaseVerifying:
			return protocol.UpdatePhaseVerifying
		}
		return protocol.UpdatePhaseApplying
	case ActWait:
		switch {
		case o.Paused && !o.Started && d.RetryAfterSeconds == retryPaused:
			return ""
		case st != nil && st.Phase == protocol.PhaseCommitted:
			return protocol.UpdatePhaseVerifying // the outside gates
		}
		return protocol.UpdatePhaseApplying // the agent finishes an earlier plan first
	case ActReportFailure:
		if d.Cause == CauseInvalidStatus && o.Started {
			// A status that cannot be read says nothing of progress: it must not
			// hold the node forever either.
			return protocol.UpdatePhaseApplying
		}
	}
	return ""
}

// seenOf says in a few words what the node reports now.
func seenOf(o Observation) string {
	switch st := o.Status; {
	case st != nil && st.PlanHash == o.PlanHash:
		s := "agent status " + agentProgress(st)
		if st.Reason != "" && st.Reason != protocol.ReasonWaitingForEtcdQuorum {
			s += ", " + st.Reason
		}
		if st.Phase == protocol.PhaseCommitted || st.Phase == protocol.PhaseVerifying {
			s += fmt.Sprintf(", node Ready=%t, kubelet %q", o.Ready, o.KubeletVersion)
		}
		return s
	case o.Staging != nil:
		return "staging " + string(o.Staging.Phase) + ": " + o.Staging.Progress()
	case st != nil:
		return "agent status " + agentProgress(st) + " for plan " + short(st.PlanHash)
	}
	return "no report from the agent for this plan"
}

// expiredDecision is the decision of an update past the deadline of rec's phase.
func expiredDecision(o Observation, rec protocol.PhaseRecord, d Deadlines) Decision {
	cause := recordCause(rec, d)
	switch rec.Phase {
	case protocol.UpdatePhasePickup:
		// Withdrawn and put back in service: the agent never started.
		return Decide(withNotPickedUp(o))
	case protocol.UpdatePhaseStaging:
		return Decision{Action: ActFail, Cause: CauseDeadlineExceeded, EventReason: inplacev1.EventDeadlineExceeded,
			Message: fmt.Sprintf("node %s: %s; the node was not cordoned (annotate the Machine with %s to try again)", o.Node, cause, inplacev1.RetryAnnotation)}
	}
	return Decision{Action: ActDegraded, Cause: CauseDeadlineExceeded, EventReason: inplacev1.EventDeadlineExceeded,
		Message: fmt.Sprintf("node %s: %s; it stays cordoned: repair the node and annotate the Machine with %s, or delete the Machine to replace it", o.Node, cause, inplacev1.RetryAnnotation)}
}
