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
	rec := func(p UpdatePhase, since time.Time) PhaseRecord {
		return PhaseRecord{Plan: "h1", Phase: p, Start: t0, Since: since, Seen: "before"}
	}
	tests := []watchCase{
		{name: "first sight of an update dates its phase",
			in: WatchInput{Now: t0, Reachable: true, Plan: "h1", Phase: UpdatePhaseStaging}, write: true, wantSince: t0},
		{name: "another plan's record is replaced",
			in:    WatchInput{Now: t0.Add(2 * time.Hour), Reachable: true, Plan: "h2", Phase: UpdatePhasePickup, Record: rec(UpdatePhasePickup, t0)},
			write: true, wantSince: t0.Add(2 * time.Hour)},
		{name: "an update Cluster API began 10 s ago is not dated yet (most end before)",
			in: WatchInput{Now: t0.Add(10 * time.Second), Began: t0, Reachable: true, Plan: "h1", Phase: UpdatePhasePickup}},
		{name: "an update Cluster API began 40 s ago is dated now",
			in:    WatchInput{Now: t0.Add(40 * time.Second), Began: t0, Reachable: true, Plan: "h1", Phase: UpdatePhasePickup},
			write: true, wantSince: t0.Add(40 * time.Second)},
		{name: "nothing timed: no write",
			in: WatchInput{Now: t0, Reachable: true, Plan: "h1"}},
	}
	for _, p := range []struct {
		phase UpdatePhase
		d     time.Duration
	}{
		{UpdatePhaseStaging, testDeadlines.Staging}, {UpdatePhasePickup, testDeadlines.Pickup}, {UpdatePhaseApplying, testDeadlines.Applying},
		{UpdatePhaseRebooting, testDeadlines.Rebooting}, {UpdatePhaseVerifying, testDeadlines.Verifying},
	} {
		since := t0.Add(time.Minute)
		tests = append(tests,
			watchCase{name: string(p.phase) + " at its deadline",
				in: WatchInput{Now: since.Add(p.d), Reachable: true, Plan: "h1", Phase: p.phase, Record: rec(p.phase, since)}},
			watchCase{name: string(p.phase) + " a second past its deadline",
				in:      WatchInput{Now: since.Add(p.d + time.Second), Reachable: true, Plan: "h1", Phase: p.phase, Record: rec(p.phase, since)},
				expired: true, write: p.phase != UpdatePhasePickup},
		)
	}
	tests = append(tests, []watchCase{
		{name: "draining has no deadline of its own (the drain timeout answers)",
			in: WatchInput{Now: t0.Add(100 * time.Hour), Reachable: true, Plan: "h1", Phase: UpdatePhaseDraining, Record: rec(UpdatePhaseDraining, t0)}},
		{name: "staged ahead of a closed window: waiting for it is not staging, however long",
			in:    WatchInput{Now: t0.Add(72 * time.Hour), Reachable: true, Plan: "h1", Phase: UpdatePhaseDraining, Record: rec(UpdatePhaseStaging, t0)},
			write: true, wantSince: t0.Add(72 * time.Hour)},
		{name: "a new phase is dated when seen",
			in:    WatchInput{Now: t0.Add(2 * time.Hour), Reachable: true, Plan: "h1", Phase: UpdatePhaseRebooting, Record: rec(UpdatePhaseApplying, t0.Add(time.Minute))},
			write: true, wantSince: t0.Add(2 * time.Hour)},
		{name: "a new phase within the quiet window is not written and cannot expire",
			in:        WatchInput{Now: t0.Add(10 * time.Second), Reachable: true, Plan: "h1", Phase: UpdatePhaseApplying, Record: rec(UpdatePhasePickup, t0)},
			wantSince: t0},
		{name: "pick-up: an outage starts: noted, not expired",
			in:    WatchInput{Now: t0.Add(4 * time.Minute), Plan: "h1", Record: rec(UpdatePhasePickup, t0)},
			write: true},
		{name: "pick-up: twenty minutes into the outage: not expired",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Record: PhaseRecord{Plan: "h1", Phase: UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0.Add(4 * time.Minute)}}},
		{name: "pick-up: back after twenty minutes: the outage does not count, and the agent gets a minute to relist",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Reachable: true, Plan: "h1", Phase: UpdatePhasePickup,
				Record: PhaseRecord{Plan: "h1", Phase: UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0.Add(4 * time.Minute)}},
			write: true, wantSince: t0.Add(20 * time.Minute)},
		{name: "pick-up: back after an outage that began at publication: the whole deadline is left",
			in: WatchInput{Now: t0.Add(24 * time.Minute), Reachable: true, Plan: "h1", Phase: UpdatePhasePickup,
				Record: PhaseRecord{Plan: "h1", Phase: UpdatePhasePickup, Start: t0, Since: t0, Unreachable: t0}},
			write: true, wantSince: t0.Add(24 * time.Minute)},
		{name: "pick-up: the next call after the outage, within the deadline: waits",
			in: WatchInput{Now: t0.Add(24*time.Minute + 30*time.Second), Reachable: true, Plan: "h1", Phase: UpdatePhasePickup,
				Record: rec(UpdatePhasePickup, t0.Add(20*time.Minute))}},
		{name: "staging: an outage pauses it too",
			in: WatchInput{Now: t0.Add(10 * time.Hour), Record: PhaseRecord{Plan: "h1", Phase: UpdatePhaseStaging, Start: t0, Since: t0, Unreachable: t0.Add(time.Minute)}}},
		{name: "rebooting: an API that never comes back counts",
			in:      WatchInput{Now: t0.Add(31 * time.Minute), Record: rec(UpdatePhaseRebooting, t0)},
			expired: true, write: true},
		{name: "rebooting: unreachable within the deadline: waits",
			in: WatchInput{Now: t0.Add(29 * time.Minute), Record: rec(UpdatePhaseRebooting, t0)}},
		{name: "unreachable with no record: nothing to judge",
			in: WatchInput{Now: t0.Add(100 * time.Hour)}},
		{name: "expired stays expired while the update runs on",
			in: WatchInput{Now: t0.Add(5 * time.Hour), Reachable: true, Plan: "h1", Phase: UpdatePhaseVerifying,
				Record: PhaseRecord{Plan: "h1", Phase: UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}},
			expired: true},
		{name: "expired stays expired while unreachable",
			in:      WatchInput{Now: t0.Add(5 * time.Hour), Record: PhaseRecord{Plan: "h1", Phase: UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}},
			expired: true},
		{name: "an expired update the node ends itself (a late commit) is the node's verdict",
			in: WatchInput{Now: t0.Add(5 * time.Hour), Reachable: true, Plan: "h1",
				Record: PhaseRecord{Plan: "h1", Phase: UpdatePhaseApplying, Start: t0, Since: t0, Expired: t0.Add(61 * time.Minute)}}},
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
			if got.Expired && got.Record.Phase != UpdatePhasePickup {
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
		want UpdatePhase
	}{
		{"not started, nothing to stage", Observation{PlanHash: h}, UpdatePhaseDraining},
		{"asked to stage", Observation{PlanHash: h, NeedsStaging: true}, UpdatePhaseStaging},
		{"staged: cordon and drain", Observation{PlanHash: h, NeedsStaging: true,
			Staging: &protocol.StagingStatus{PlanHash: h, Phase: protocol.StagePhaseStaged}}, UpdatePhaseDraining},
		{"published, no status", Observation{PlanHash: h, Published: h, Started: true}, UpdatePhasePickup},
		{"the agent applies", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseApplying)}, UpdatePhaseApplying},
		{"the agent rolls back", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseRollingBack)}, UpdatePhaseApplying},
		{"the agent reboots", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseRebooting)}, UpdatePhaseRebooting},
		{"the agent's gates", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseVerifying)}, UpdatePhaseVerifying},
		{"committed, waiting for Ready", Observation{PlanHash: h, Published: h, Started: true, Status: status(h, protocol.PhaseCommitted)}, UpdatePhaseVerifying},
		{"an earlier plan still applying", Observation{PlanHash: h, Published: "old", Started: true, Status: status("old", protocol.PhaseApplying)}, UpdatePhaseApplying},
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
		phase  UpdatePhase
		action Action
		cause  Cause
	}{
		{UpdatePhaseStaging, ActFail, CauseDeadlineExceeded},
		{UpdatePhasePickup, ActAbandon, CausePlanNotPickedUp},
		{UpdatePhaseApplying, ActDegraded, CauseDeadlineExceeded},
		{UpdatePhaseRebooting, ActDegraded, CauseDeadlineExceeded},
		{UpdatePhaseVerifying, ActDegraded, CauseDeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(string(tt.phase), func(t *testing.T) {
			g := NewWithT(t)
			rec := PhaseRecord{Plan: "h1", Phase: tt.phase, Start: t0, Since: t0, Expired: t0.Add(2 * time.Hour), Seen: "agent status Rebooting (5/9 reboot)"}
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

func TestPhaseRecordRoundTrip(t *testing.T) {
	g := NewWithT(t)
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	rec := PhaseRecord{Plan: "h1", Phase: UpdatePhaseRebooting, Start: t0, Since: t0.Add(time.Minute), Unreachable: t0.Add(2 * time.Minute), Seen: "x"}
	g.Expect(DecodePhaseRecord(rec.Encode())).To(Equal(rec))
	g.Expect(DecodePhaseRecord("not json")).To(Equal(PhaseRecord{}))
	g.Expect(DecodePhaseRecord(`{"plan":"h1"}`)).To(Equal(PhaseRecord{}), "a record without a time dates nothing")
}
