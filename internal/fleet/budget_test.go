package fleet

import (
	"strings"
	"testing"
	"time"
)

func TestBudgetAndCounted(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	w1 := Failure{Machine: "m1", Node: "w1", Pool: "workers", Owner: "MachineDeployment/md-0", Spec: "s1", Plan: "p1", Cause: "RolledBack: GateFailed", At: at}
	w2 := Failure{Machine: "m2", Node: "w2", Pool: "workers", Owner: "MachineDeployment/md-0", Spec: "s1", Plan: "p2", Cause: "AgentFailed", At: at}
	cp := Failure{Machine: "m3", Node: "cp1", Pool: "", Owner: "KubeadmControlPlane/cp", Spec: "k1", Plan: "p3", Cause: "RolledBack", At: at}
	specs := map[string]string{"MachineDeployment/md-0": "s1", "KubeadmControlPlane/cp": "k1"}
	same := func(o string) (string, bool) { s, ok := specs[o]; return s, ok }
	changed := func(o string) (string, bool) { return "s2", true }
	gone := func(string) (string, bool) { return "", false }

	for _, tc := range []struct {
		name     string
		budget   Budget
		failures []Failure
		pool     string
		lookup   SpecLookup
		halted   bool
		msg      string
	}{
		{name: "no failures", budget: 1, pool: "workers", lookup: same},
		{name: "one of one", budget: 1, failures: []Failure{w1}, pool: "workers", lookup: same, halted: true,
			msg: "halted: 1 of 1 failures allowed (node w1: RolledBack: GateFailed)"},
		{name: "one of two: goes on", budget: 2, failures: []Failure{w1}, pool: "workers", lookup: same},
		{name: "two of two", budget: 2, failures: []Failure{w1, w2}, pool: "workers", lookup: same, halted: true,
			msg: "halted: 2 of 2 failures allowed (node w1: RolledBack: GateFailed; node w2: AgentFailed)"},
		{name: "other pool's failure does not count", budget: 1, failures: []Failure{cp}, pool: "workers", lookup: same},
		{name: "spec changed: budget reset", budget: 1, failures: []Failure{w1}, pool: "workers", lookup: changed},
		{name: "owner gone: not counted", budget: 1, failures: []Failure{w1}, pool: "workers", lookup: gone},
		{name: "budget 0: disabled", budget: 0, failures: []Failure{w1, w2}, pool: "workers", lookup: same},
	} {
		t.Run(tc.name, func(t *testing.T) {
			halted, msg := tc.budget.Halted(Counted(tc.failures, tc.pool, tc.lookup))
			if halted != tc.halted || msg != tc.msg {
				t.Errorf("got %v %q, want %v %q", halted, msg, tc.halted, tc.msg)
			}
		})
	}
}

func TestStateRecord(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var st State
	f := Failure{Machine: "m1", Node: "w1", Plan: "p1", Cause: "RolledBack", At: at}
	if !st.RecordFailure(f) || st.RecordFailure(f) {
		t.Fatal("a failure is recorded once, however often the hook is called")
	}
	f2 := f
	f2.Plan = "p2"
	if !st.RecordFailure(f2) || len(st.Failures) != 2 {
		t.Fatal("a new plan of the same Machine is a new failure")
	}
	round, err := Decode(st.Encode())
	if err != nil || len(round.Failures) != 2 || !round.Failures[0].At.Equal(at) {
		t.Fatalf("round trip: %+v %v", round, err)
	}
	if !st.Forget("m1") || st.Forget("m1") || len(st.Failures) != 0 {
		t.Fatal("retry forgets the Machine's failures")
	}
	st.RecordFailure(f)
	if !st.Resume() || st.Resume() {
		t.Fatal("resume clears once")
	}
	if st.Encode() != "" {
		t.Fatalf("empty record encodes as nothing: %q", st.Encode())
	}
	if _, err := Decode("{not json"); err == nil {
		t.Fatal("corrupt record must be an error")
	}

	if got := st.ExpectedDuration(30 * time.Minute); got != 30*time.Minute {
		t.Fatalf("default before any measurement: %s", got)
	}
	for i, took := range []time.Duration{4 * time.Minute, 9 * time.Minute, 2 * time.Minute} {
		if !st.RecordFinished("workers", "w"+string(rune('1'+i)), "p", at, took) {
			t.Fatal("new finish not recorded")
		}
	}
	if st.RecordFinished("workers", "w3", "p", at.Add(time.Hour), time.Hour) {
		t.Fatal("the same node and plan finish once")
	}
	if got := st.ExpectedDuration(30 * time.Minute); got != 4*time.Minute {
		t.Fatalf("expected = the median measured: %s", got)
	}
	for range 10 {
		st.RecordFinished("workers", "x", string(rune('a'+len(st.DurationsSeconds))), at, time.Minute)
	}
	if len(st.DurationsSeconds) != maxDurations {
		t.Fatalf("durations bounded: %v", st.DurationsSeconds)
	}
}

func TestGate(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // Tuesday
	closed, _ := ParseWindows("Sat 02:00-06:00 UTC")
	open, _ := ParseWindows("Tue 10:00-14:00 UTC")
	failed := []Failure{{Machine: "m1", Node: "w1", Cause: "RolledBack: GateFailed"}}
	last := &Finished{Node: "w1", At: now.Add(-30 * time.Second)}
	for _, tc := range []struct {
		name   string
		in     GateInput
		reason HoldReason
		msg    string
		retry  time.Duration
	}{
		{name: "nothing configured: go", in: GateInput{Node: "w2", Now: now, Budget: 1}},
		{name: "halted first, even in an open window", in: GateInput{Node: "w2", Now: now, Budget: 1, Counted: failed, Windows: open}, reason: HoldHalted, retry: 15 * time.Second,
			msg: "halted: 1 of 1 failures allowed (node w1: RolledBack: GateFailed); node w2 not started (annotate the Cluster with inplace.capi-inplace.dev/resume to continue)"},
		{name: "closed window names the next opening", in: GateInput{Node: "w2", Now: now, Budget: 1, Windows: closed, Expected: time.Hour}, reason: HoldWindowClosed, retry: 15 * time.Second,
			msg: "waiting for a maintenance window: the maintenance window is closed; next opening 2026-12-05T02:00:00Z; node w2 not started"},
		{name: "open window too short", in: GateInput{Node: "w2", Now: now.Add(90 * time.Minute), Budget: 1, Windows: open, Expected: time.Hour}, reason: HoldWindowClosed, retry: 15 * time.Second,
			msg: "waiting for a maintenance window: the maintenance window closes at 2026-12-01T14:00:00Z, before the expected 1h0m0s of the update would end; next opening 2026-12-08T10:00:00Z; node w2 not started"},
		{name: "opening soon: call back then", in: GateInput{Node: "w2", Now: time.Date(2026, 12, 1, 9, 59, 50, 0, time.UTC), Budget: 1, Windows: open, Expected: time.Hour}, reason: HoldWindowClosed, retry: 10 * time.Second,
			msg: "waiting for a maintenance window: the maintenance window is closed; next opening 2026-12-01T10:00:00Z; node w2 not started"},
		{name: "broken windows hold", in: GateInput{Node: "w2", Now: now, Budget: 1, WindowsErr: ErrWindow}, reason: HoldWindowClosed, retry: 15 * time.Second,
			msg: "node w2 not started: the maintenance windows do not parse: invalid maintenance window"},
		{name: "soaking", in: GateInput{Node: "w2", Now: now, Budget: 1, Soak: time.Minute, Last: last, LastHealthy: true}, reason: HoldSoaking, retry: 5 * time.Second,
			msg: "soaking: node w1 finished at 2026-12-01T11:59:30Z and must stay healthy until 2026-12-01T12:00:30Z; node w2 not started"},
		{name: "soaked", in: GateInput{Node: "w2", Now: now.Add(time.Minute), Budget: 1, Soak: time.Minute, Last: last, LastHealthy: true}},
		{name: "soaked but unhealthy", in: GateInput{Node: "w2", Now: now.Add(time.Minute), Budget: 1, Soak: time.Minute, Last: last}, reason: HoldSoaking, retry: 5 * time.Second,
			msg: "soaking: node w1, updated last, is not Ready; node w2 not started"},
		{name: "the soaking node itself is not held", in: GateInput{Node: "w1", Now: now, Budget: 1, Soak: time.Minute, Last: last}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := Gate(tc.in)
			if h.Reason != tc.reason || h.Message != tc.msg || h.RetryAfter != tc.retry {
				t.Errorf("Gate = %+v\nwant reason %q retry %s msg %q", h, tc.reason, tc.retry, tc.msg)
			}
		})
	}
}

// TestExpectedDurationAfterASlowUpdate: one update held for ten hours (a drain a
// PodDisruptionBudget blocked) no longer sets an expectation no nightly window
// fits: the median of the recent ones counts, at most twice the pool's own
// expectation, and resume forgets the measurements. Before, the longest one was
// the expectation and every night's window was skipped for ever (review F8).
func TestExpectedDurationAfterASlowUpdate(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	def := 30 * time.Minute
	tests := []struct {
		name string
		durs []time.Duration
		want time.Duration
	}{
		{"nothing measured", nil, def},
		{"one slow update alone: capped at twice the pool's", []time.Duration{10 * time.Hour}, time.Hour},
		{"one slow among quick ones: the median", []time.Duration{20 * time.Minute, 10 * time.Hour, 25 * time.Minute}, 25 * time.Minute},
		{"an even count: the upper median", []time.Duration{10 * time.Minute, 40 * time.Minute}, 40 * time.Minute},
		{"updates slower than the pool's expectation: up to twice it", []time.Duration{50 * time.Minute, 55 * time.Minute, 58 * time.Minute}, 55 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st State
			for i, d := range tt.durs {
				st.RecordFinished("workers", "n", string(rune('a'+i)), at, d)
			}
			if got := st.ExpectedDuration(def); got != tt.want {
				t.Errorf("ExpectedDuration = %s, want %s", got, tt.want)
			}
		})
	}

	var st State
	st.RecordFinished("workers", "n", "p", at, 10*time.Hour)
	in := GateInput{Node: "w2", Now: time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC), Budget: 1, Expected: st.ExpectedDuration(def)}
	var err error
	if in.Windows, err = ParseWindows("* 22:00-04:00 UTC"); err != nil {
		t.Fatal(err)
	}
	if hold := Gate(in); hold.Reason != HoldWindowClosed || !strings.Contains(hold.Message, "next opening 2026-12-01T22:00:00Z") {
		t.Fatalf("a nightly six-hour window must fit after a ten-hour update: %+v", hold)
	}
	if !st.Resume() || len(st.DurationsSeconds) != 0 {
		t.Fatalf("resume forgets the measured durations: %v", st.DurationsSeconds)
	}
}
