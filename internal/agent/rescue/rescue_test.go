package rescue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// updateAt returns a control plane's Kubernetes upgrade stepped to its action
// named at (not run yet), or, with fail, rolling back after that action failed.
func updateAt(t *testing.T, controlPlane bool, at state.ActionName, fail bool) state.State {
	t.Helper()
	spec := state.Spec{ControlPlane: controlPlane, ExternalEtcd: true, Kubeadm: protocol.KubeadmUpgradeApply, Version: "v1.36.0"}
	st, out, err := state.Step(state.State{}, state.PlanObserved{Hash: "h1", Spec: spec, At: time.Unix(100, 0)})
	for err == nil && out.Next != nil && out.Next.Name != at {
		st, out, err = state.Step(st, state.ActionSucceeded{Name: out.Next.Name})
	}
	if err == nil && fail {
		st, _, err = state.Step(st, state.ActionFailed{Name: at, Reason: state.ReasonGateFailed, Message: "failed"})
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDecide: what the rescue does, from the journal's state and what it saw
// of the node's API server.
func TestDecide(t *testing.T) {
	committed := updateAt(t, true, "", false)
	if committed.Phase != protocol.PhaseCommitted {
		t.Fatalf("phase %s, want Committed", committed.Phase)
	}
	rolledBack := updateAt(t, true, state.ActGates, true)
	for rolledBack.Phase == protocol.PhaseRollingBack {
		cur, _ := rolledBack.CurrentAction()
		rolledBack, _, _ = state.Step(rolledBack, state.ActionSucceeded{Name: cur.Name})
	}
	allSeen := []Seen{NotProbed, NotReady, Ready, PastDeadline}
	tests := []struct {
		name string
		st   state.State
		want map[Seen]Verdict
	}{
		{"empty journal", state.State{}, map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
		{"committed", committed, map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
		{"rolled back", rolledBack, map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
		{"control plane, before the first change to its boot", updateAt(t, true, state.ActBackupFiles, false),
			map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
		{"control plane, at kubeadm", updateAt(t, true, state.ActKubeadmUpgrade, false),
			map[Seen]Verdict{NotProbed: Probe, NotReady: Probe, Ready: StandBy, PastDeadline: RollBack}},
		{"control plane, at the gates", updateAt(t, true, state.ActGates, false),
			map[Seen]Verdict{NotProbed: Probe, NotReady: Probe, Ready: StandBy, PastDeadline: RollBack}},
		{"control plane, rolling back: finished whatever the API server does", updateAt(t, true, state.ActGates, true),
			map[Seen]Verdict{NotProbed: RollBack, NotReady: RollBack, Ready: RollBack, PastDeadline: RollBack}},
		{"worker, at kubeadm: never", updateAt(t, false, state.ActKubeadmUpgrade, false),
			map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
		{"worker, rolling back: never", updateAt(t, false, state.ActGates, true),
			map[Seen]Verdict{NotProbed: Leave, NotReady: Leave, Ready: Leave, PastDeadline: Leave}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := map[Seen]Verdict{}
			for _, seen := range allSeen {
				got[seen] = Decide(tt.st, seen)
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// fakeExecutor holds a state; RollBack fails the current action and runs the
// rollback to its end.
type fakeExecutor struct {
	st       state.State
	rollback []string
	loadErr  error
}

func (f *fakeExecutor) Load() (state.State, *protocol.NodePlan, error) { return f.st, nil, f.loadErr }

func (f *fakeExecutor) RollBack(_ context.Context, reason, message string) (state.State, error) {
	f.rollback = append(f.rollback, reason+": "+message)
	st := f.st
	var err error
	if st.Phase != protocol.PhaseRollingBack {
		cur, _ := st.CurrentAction()
		if st, _, err = state.Step(st, state.ActionFailed{Name: cur.Name, Reason: reason, Message: message}); err != nil {
			return st, err
		}
	}
	for st.Phase == protocol.PhaseRollingBack {
		cur, _ := st.CurrentAction()
		if st, _, err = state.Step(st, state.ActionSucceeded{Name: cur.Name}); err != nil {
			return st, err
		}
	}
	f.st = st
	return st, nil
}

// clock is a fake clock that the probes move on.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// TestRun: the rescue probes until the API server answers ready (and stands
// by, the journal untouched) or the deadline passes (and rolls back once, with
// the reason and the last probe's answer).
func TestRun(t *testing.T) {
	refused := errors.New("connection refused")
	tests := []struct {
		name string
		st   state.State
		// probes are the probes' answers in turn (the last repeats); each
		// moves the clock a minute on.
		probes       []error
		want         Verdict
		wantProbes   int
		wantRollBack bool
		wantEnd      protocol.Phase
	}{
		{"ready at once", updateAt(t, true, state.ActKubeadmUpgrade, false), []error{nil}, StandBy, 1, false, protocol.PhaseApplying},
		{"ready after three minutes", updateAt(t, true, state.ActKubeadmUpgrade, false), []error{refused, refused, refused, nil}, StandBy, 4, false, protocol.PhaseApplying},
		{"never ready: rolled back at the deadline", updateAt(t, true, state.ActKubeadmUpgrade, false), []error{refused}, Leave, 10, true, protocol.PhaseRolledBack},
		{"a rollback in flight: finished, no probe", updateAt(t, true, state.ActGates, true), []error{nil}, Leave, 0, true, protocol.PhaseRolledBack},
		{"nothing for the rescue: no probe", updateAt(t, true, state.ActBackupFiles, false), []error{nil}, Leave, 0, false, protocol.PhaseApplying},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &clock{now: time.Unix(1000, 0)}
			x := &fakeExecutor{st: tt.st}
			probes := 0
			r := &Rescuer{Executor: x, Deadline: 10 * time.Minute, Now: c.Now, Log: logr.Discard(),
				Probe: func(context.Context) error {
					ans := tt.probes[min(probes, len(tt.probes)-1)]
					probes++
					c.now = c.now.Add(time.Minute)
					return ans
				}}
			v, st, err := r.Run(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v).To(Equal(tt.want))
			g.Expect(probes).To(Equal(tt.wantProbes))
			g.Expect(st.Phase).To(Equal(tt.wantEnd))
			if !tt.wantRollBack {
				g.Expect(x.rollback).To(BeEmpty())
				return
			}
			g.Expect(x.rollback).To(HaveLen(1))
			if tt.wantProbes > 0 {
				g.Expect(st.Reason).To(Equal(state.ReasonAPIServerNotBack))
				g.Expect(st.Message).To(ContainSubstring("not ready within 10m0s"))
				g.Expect(st.Message).To(ContainSubstring("connection refused"))
			}
		})
	}
}

// TestRunStopsWithItsContext: a rescue stopped while it waits for the API
// server returns without acting.
func TestRunStopsWithItsContext(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	x := &fakeExecutor{st: updateAt(t, true, state.ActKubeadmUpgrade, false)}
	r := &Rescuer{Executor: x, Deadline: time.Hour, Interval: time.Hour, Now: time.Now, Log: logr.Discard(),
		Probe: func(context.Context) error { cancel(); return errors.New("refused") }}
	_, _, err := r.Run(ctx)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(x.rollback).To(BeEmpty())
}

// TestRunUnreadableJournal: a journal that cannot be read is not acted on.
func TestRunUnreadableJournal(t *testing.T) {
	g := NewWithT(t)
	x := &fakeExecutor{loadErr: errors.New("journal is corrupt")}
	r := &Rescuer{Executor: x, Deadline: time.Hour, Now: time.Now, Log: logr.Discard(), Probe: func(context.Context) error { return nil }}
	_, _, err := r.Run(context.Background())
	g.Expect(err).To(HaveOccurred())
	g.Expect(x.rollback).To(BeEmpty())
}
