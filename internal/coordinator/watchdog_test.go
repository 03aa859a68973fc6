package coordinator

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var testDeadlines = Deadlines{Staging: 30 * time.Minute, Pickup: 5 * time.Minute, Applying: time.Hour,
	Rebooting: 30 * time.Minute, Verifying: time.Hour}

type watchCase struct {
	name      string
	in        WatchInput
	expired   bool
	write     bool
	wantSince time.Time // of the resulting record; zero: not checked
}

// TestWatch: each timed phase just before and just past its deadline, dated on
// the coordinator's clock from the record on the Machine; outages pause staging
// and pick-up (F14) and count from applying on (F4).
func TestWatch(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rec := func(p protocol.UpdatePhase, since time.Time) protocol.PhaseRecord {
		return protocol.PhaseRecord{Plan: "h1", Phase: p, Start: t0, Since: since, Seen: "before"}
	}
	tests := []watchCase{
		{name: "first sight of an update dates its phase",
			in: WatchInput{Now: t0, Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseStaging}, write: true, wantSince: t0},
		{name: "another plan's record is replaced",
			in:    WatchInput{Now: t0.Add(2 * time.Hour), Reachable: true, Plan: "h2", Phase: protocol.UpdatePhasePickup, Record: rec(protocol.UpdatePhasePickup, t0)},
			write: true, wantSince: t0.Add(2 * time.Hour)},
		{name: "an update Cluster API began 10 s ago is not dated yet (most end before)",
			in: WatchInput{Now: t0.Add(10 * time.Second), Began: t0, Reachable: true, Plan: "h1", Phase: protocol.UpdatePhasePickup}},
		{name: "an update Cluster API began 40 s ago is dated now",
			in:    WatchInput{Now: t0.Add(40 * time.Second), Began: t0, Reachable: true, Plan: "h1", Phase: protocol.UpdatePhasePickup},
			write: true, wantSince: t0.Add(40 * time.Second)},
		{name: "nothing timed: no write",
			in: WatchInput{Now: t0, Reachable: true, Plan: "h1"}},
	}
	for _, p := range []struct {
		phase protocol.UpdatePhase
		d     time.Duration
	}{
		{protocol.UpdatePhaseStaging, testDeadlines.Staging}, {protocol.UpdatePhasePickup, testDeadlines.Pickup}, {protocol.UpdatePhaseApplying, testDeadlines.Applying},
		{protocol.UpdatePhaseRebooting, testDeadlines.Rebooting}, {protocol.UpdatePhaseVerifying, testDeadlines.Verifying},
	} {
		since := t0.Add(time.Minute)
		tests = append(tests,
			watchCase{name: string(p.phase) + " at its deadline",
				in: WatchInput{Now: since.Add(p.d), Reachable: true, Plan: "h1", Phase: p.phase, Record: rec(p.phase, since)}},
			watchCase{name: string(p.phase) + " a second past its deadline",
				in:      WatchInput{Now: since.Add(p.d + time.Second), Reachable: true, Plan: "h1", Phase: p.phase, Record: rec(p.phase, since)},
				expired: true, write: p.phase != protocol.UpdatePhasePickup},
		)
	}
	tests = append(tests, []watchCase{
		{name: "draining has no deadline of its own (the drain timeout answers)",
			in: WatchInput{Now: t0.Add(100 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseDraining, Record: rec(protocol.UpdatePhaseDraining, t0)}},
		{name: "staged ahead of a closed window: waiting for it is not staging, however long",
			in:    WatchInput{Now: t0.Add(72 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseStaged, Record: rec(protocol.UpdatePhaseStaging, t0)},
			write: true, wantSince: t0.Add(72 * time.Hour)},
		{name: "staged and waiting: no deadline, no write",
			in: WatchInput{Now: t0.Add(7 * 24 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseStaged, Record: rec(protocol.UpdatePhaseStaged, t0)}},
		{name: "the window opens: cordon moves the record on",
			in:    WatchInput{Now: t0.Add(96 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseDraining, Record: rec(protocol.UpdatePhaseStaged, t0)},
			write: true, wantSince: t0.Add(96 * time.Hour)},
		{name: "a new phase is dated when seen",
			in:    WatchInput{Now: t0.Add(2 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseRebooting, Record: rec(protocol.UpdatePhaseApplying, t0.Add(time.Minute))},
			write: true, wantSince: t0.Add(2 * time.Hour)},
		{name: "a new phase within the quiet window is not written and cannot expire",
			in:        WatchInput{Now: t0.Add(10 * time.Second), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseApplying, Record: rec(protocol.UpdatePhasePickup, t0)},
			wantSince: t0},
		{name: "pick-up: an outage starts: noted, not expired",
			in:    WatchInput{Now: t0.Add(4 * time.Minute), Plan: "h1", Record: rec(protocol.UpdatePhasePickup, t0)},
			write: true},
		{name: "pick-up: twenty minutes into the outage: not expired",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0.Add(4 * time.Minute)}}},
		{name: "pick-up: back after twenty minutes: the outage does not count, and the agent gets a minute to relist",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhasePickup,
				Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0.Add(4 * time.Minute)}},
			write: true, wantSince: t0.Add(20 * time.Minute)},
		{name: "pick-up: back after an outage that began at publication: the whole deadline is left",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhasePickup,
				Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0}},
			write: true, wantSince: t0.Add(24 * time.Minute)},
		{name: "pick-up: the next call after the outage, within the deadline: waits",
			in: WatchInput{Now: t0.Add(24*time.Minute + 30*time.Second), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhasePickup,
				Record: rec(protocol.UpdatePhasePickup, t0.Add(20*time.Minute))}},
		{name: "staging: an outage pauses it too",
			in: WatchInput{Now: t0.Add(10 * time.Hour), Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseStaging, Start: t0, Since: t0, Unreachable: t0.Add(time.Minute)}}},
		{name: "rebooting: an API that never comes back counts",
			in:      WatchInput{Now: t0.Add(31 * time.Minute), Record: rec(protocol.UpdatePhaseRebooting, t0)},
			expired: true, write: true},
		{name: "rebooting: unreachable within the deadline: waits",
			in: WatchInput{Now: t0.Add(29 * time.Minute), Record: rec(protocol.UpdatePhaseRebooting, t0)}},
		{name: "unreachable with no record: nothing to judge",
			in: WatchInput{Now: t0.Add(100 * time.Hour)}},
		{name: "expired stays expired while the update runs on",
			in: WatchInput{Now: t0.Add(5 * time.Hour), Reachable: true, Plan: "h1", Phase: protocol.UpdatePhaseVerifying,
				Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}},
			expired: true},
		{name: "expired stays expired while unreachable",
			in:      WatchInput{Now: t0.Add(5 * time.Hour), Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}},
			expired: true},
		{name: "an expired update the node ends itself (a late commit) is the node's verdict",
			in: WatchInput{Now: t0.Add(5 * time.Hour), Reachable: true, Plan: "h1",
				Record: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.in.Deadlines = testDeadlines
			got := Watch(tt.in)
			g.Expect(got.Expired).To(Equal(tt.expired), "expired")
			g.Expect(got.Write).To(Equal(tt.write), "write")
			if !tt.wantSince.IsZero() {
				g.Expect(got.Record.Since).To(Equal(tt.wantSince))
			}
			if got.Expired && got.Record.Phase != protocol.UpdatePhasePickup {
				g.Expect(got.Record.Expired.IsZero()).To(BeFalse(), "an expired record says when")
			}
		})
	}
}

// TestPhaseOf: the timed phase follows Decide's verdict and the agent's status.
func TestPhaseOf(t *testing.T) {
	const h = "h1"
	tests := []struct {
		name string
		o    Observation
		want protocol.UpdatePhase
	}{
		{"not started, nothing to stage", Observation{PlanHash: h}, protocol.UpdatePhaseDraining},
		{"asked to stage", Observation{PlanHash: h, NeedsStaging: true}, protocol.UpdatePhaseStaging},
		{"staged: cordon and drain", Observation{PlanHash: h, NeedsStaging: true,
			Staging: &protocol.StagingStatus{PlanHash: h, Phase: protocol.StagePhaseStaged}}, protocol.UpdatePhaseDraining},
		{"published, no status", Observation{PlanHash: h, Published: h, Started: true}, protocol.UpdatePhasePickup},
		{"the agent applies", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseApplying)}, protocol.UpdatePhaseApplying},
		{"the agent rolls back", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseRollingBack)}, protocol.UpdatePhaseApplying},
		{"the agent reboots", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseRebooting)}, protocol.UpdatePhaseRebooting},
		{"the agent's gates", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseVerifying)}, protocol.UpdatePhaseVerifying},
		{"committed, waiting for Ready", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseCommitted)}, protocol.UpdatePhaseVerifying},
		{"an earlier plan still applying", Observation{PlanHash: h, Published: "old", Started: true, Status: status("old", protocol.PhaseApplying)}, protocol.UpdatePhaseApplying},
		{"paused before start", Observation{PlanHash: h, Paused: true}, ""},
		{"committed and Ready: over", Observation{PlanHash: h, Published: h, Started: true, Ready: true, Status: status(h, protocol.PhaseCommitted)}, ""},
		{"rolled back: over", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseRolledBack)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(phaseOf(tt.o, Decide(tt.o))).To(Equal(tt.want))
		})
	}
}

// TestExpiredDecision: past a deadline, staging fails with the node untouched,
// pick-up withdraws the plan, and every phase after cordon keeps the node
// cordoned; each says which phase, since when and what was last seen.
func TestExpiredDecision(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	o := Observation{Node: "n1", PlanHash: "h1", Published: "h1", Started: true}
	tests := []struct {
		phase  protocol.UpdatePhase
		action Action
		cause  Cause
	}{
		{protocol.UpdatePhaseStaging, ActFail, CauseDeadlineExceeded},
		{protocol.UpdatePhasePickup, ActAbandon, CausePlanNotPickedUp},
		{protocol.UpdatePhaseApplying, ActDegraded, CauseDeadlineExceeded},
		{protocol.UpdatePhaseRebooting, ActDegraded, CauseDeadlineExceeded},
		{protocol.UpdatePhaseVerifying, ActDegraded, CauseDeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			g := NewWithT(t)
			rec := protocol.PhaseRecord{Plan: "h1", Phase: tt.phase, Start: t0, Since: t0, Expired: t0.Add(2 * time.Hour), Seen: "agent status Rebooting (5/9 reboot)"}
			d := expiredDecision(o, rec, testDeadlines)
			g.Expect(d.Action).To(Equal(tt.action))
			g.Expect(d.Cause).To(Equal(tt.cause))
			if tt.cause == CauseDeadlineExceeded {
				g.Expect(d.Message).To(ContainSubstring("phase " + string(tt.phase)))
				g.Expect(d.Message).To(ContainSubstring("since 2026-12-04T10:00:00Z"))
				g.Expect(d.Message).To(ContainSubstring("last seen: agent status Rebooting (5/9 reboot)"))
			}
		})
	}
}
