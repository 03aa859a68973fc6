package singlenode

import (
	"testing"

	. "github.com/onsi/gomega"
)

func ready(name string) MachineState {
	return MachineState{Name: name, Eligible: true, Complete: true, HasNode: true, Why: []string{"Version v1.35.0, v1.36.0 required"}}
}

func upToDate(name string) MachineState {
	return MachineState{Name: name, UpToDate: true, Complete: true, HasNode: true}
}

// cancelled is m with the Machine's cancel annotation.
func cancelled(m MachineState) MachineState {
	m.CancelRequested = true
	return m
}

func TestDecide(t *testing.T) {
	held := func(machines ...MachineState) State {
		return State{Held: true, OptedIn: true, BelowThreshold: true, Target: "t2", Machines: machines}
	}
	tests := []struct {
		name        string
		state       State
		wantAction  Action
		wantMachine string
		wantMessage string
	}{
		{name: "not held", state: State{Machines: []MachineState{ready("m1")}}, wantAction: ActionNone},
		{name: "held, outdated Machine with a node is updated", state: held(ready("m1")), wantAction: ActionUpdate, wantMachine: "m1"},
		{name: "held, everything up to date is released", state: held(upToDate("m1")), wantAction: ActionRelease},
		{name: "held, no Machines yet is released (KCP creates them at the new spec)", state: held(), wantAction: ActionRelease},
		{
			name:       "outdated Machine without a node waits",
			state:      held(func() MachineState { m := ready("m1"); m.HasNode = false; return m }()),
			wantAction: ActionWait, wantMessage: "has no node yet",
		},
		{
			name: "outdated Machine needing replacement waits, never surges",
			state: held(func() MachineState {
				m := ready("m1")
				m.Eligible = false
				m.Why = []string{"Certificates will expire soon"}
				return m
			}()),
			wantAction: ActionWait, wantMessage: "Certificates will expire soon",
		},
		{
			name:       "outdated Machine without its objects waits",
			state:      held(func() MachineState { m := ready("m1"); m.Complete = false; return m }()),
			wantAction: ActionWait, wantMessage: "no KubeadmConfig",
		},
		{
			name:       "deleting Machine waits",
			state:      held(func() MachineState { m := ready("m1"); m.Deleting = true; return m }()),
			wantAction: ActionWait, wantMessage: "being deleted",
		},
		{
			name:       "failed target keeps the hold",
			state:      func() State { s := held(ready("m1")); s.FailedTarget = "t2"; return s }(),
			wantAction: ActionKeepFailed,
		},
		{
			name: "failed on a deadline: the outdated Machine's update is asked about again",
			state: func() State {
				s := held(upToDate("m0"), ready("m1"))
				s.FailedTarget, s.FailedMayEnd = "t2", true
				return s
			}(),
			wantAction: ActionRecheck, wantMachine: "m1",
		},
		{
			name: "failed on a deadline, the Machine without a node: nothing to ask",
			state: func() State {
				m := ready("m1")
				m.HasNode = false
				s := held(m)
				s.FailedTarget, s.FailedMayEnd = "t2", true
				return s
			}(),
			wantAction: ActionKeepFailed,
		},
		{
			name: "failed on a deadline, a retry asked for: retried",
			state: func() State {
				m := ready("m1")
				m.RetryRequested = true
				s := held(m)
				s.FailedTarget, s.FailedMayEnd = "t2", true
				return s
			}(),
			wantAction: ActionRetry, wantMachine: "m1",
		},
		{
			name: "failed target with the Machine's retry annotation is retried",
			state: func() State {
				m := ready("m1")
				m.RetryRequested = true
				s := held(upToDate("m0"), m)
				s.FailedTarget = "t2"
				return s
			}(),
			wantAction: ActionRetry, wantMachine: "m1",
		},
		{
			name: "a retry annotation on an up-to-date Machine retries nothing",
			state: func() State {
				m := upToDate("m0")
				m.RetryRequested = true
				s := held(m, ready("m1"))
				s.FailedTarget = "t2"
				return s
			}(),
			wantAction: ActionKeepFailed,
		},
		{
			name:       "a failure of an older target does not block the new one",
			state:      func() State { s := held(ready("m1")); s.FailedTarget = "t1"; return s }(),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "reverted spec after a failure: everything up to date is released",
			state:      func() State { s := held(upToDate("m1")); s.FailedTarget = "t1"; return s }(),
			wantAction: ActionRelease,
		},
		{
			name:       "opt-out releases to upstream",
			state:      func() State { s := held(ready("m1")); s.OptedIn = false; return s }(),
			wantAction: ActionRelease, wantMessage: "no longer opts",
		},
		{
			name:       "opt-out in the middle of a node update finishes the node first",
			state:      func() State { s := held(ready("m1")); s.OptedIn = false; s.Updating = "m1"; return s }(),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "scaled to three replicas releases to upstream",
			state:      func() State { s := held(ready("m1")); s.BelowThreshold = false; return s }(),
			wantAction: ActionRelease, wantMessage: "three or more",
		},
		{
			name:       "two replicas: the first outdated one by name",
			state:      held(ready("m2"), ready("m1")),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "two replicas: the one in flight goes first",
			state:      func() State { s := held(ready("m1"), ready("m2")); s.Updating = "m2"; return s }(),
			wantAction: ActionUpdate, wantMachine: "m2",
		},
		{
			name:       "two replicas: one aligned, the next is updated",
			state:      held(upToDate("m1"), ready("m2")),
			wantAction: ActionUpdate, wantMachine: "m2",
		},
		{
			name:       "two replicas: a ready one is updated while another waits for its node",
			state:      held(func() MachineState { m := ready("m1"); m.HasNode = false; return m }(), ready("m2")),
			wantAction: ActionUpdate, wantMachine: "m2",
		},
		{
			name:       "cancelled before it started: nothing starts, the hold stays",
			state:      held(cancelled(ready("m1"))),
			wantAction: ActionCancel, wantMachine: "m1", wantMessage: "Machine m1: update cancelled by annotation inplace.capi-inplace.dev/cancel before it started",
		},
		{
			name:       "cancelled in flight: the coordinator decides whether it is too late",
			state:      func() State { s := held(cancelled(ready("m1"))); s.Updating = "m1"; return s }(),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "a spec reverted while cancelled is released",
			state:      held(cancelled(upToDate("m1"))),
			wantAction: ActionRelease,
		},
		{
			name:       "opt-out while cancelled releases to upstream",
			state:      func() State { s := held(cancelled(ready("m1"))); s.OptedIn = false; return s }(),
			wantAction: ActionRelease, wantMessage: "no longer opts",
		},
		{
			name:       "a cancel does not hide a failed target",
			state:      func() State { s := held(cancelled(ready("m1"))); s.FailedTarget = "t2"; return s }(),
			wantAction: ActionKeepFailed,
		},
		{
			name: "retry and cancel on a failed target: the retry forgets the failure, the cancel then holds",
			state: func() State {
				m := cancelled(ready("m1"))
				m.RetryRequested = true
				s := held(m)
				s.FailedTarget = "t2"
				return s
			}(),
			wantAction: ActionRetry, wantMachine: "m1",
		},
		{
			name:       "two replicas: a cancelled one is skipped, the next is updated",
			state:      held(cancelled(ready("m1")), ready("m2")),
			wantAction: ActionUpdate, wantMachine: "m2",
		},
		{
			name:       "two replicas: cancelled and waiting, both said",
			state:      held(cancelled(ready("m2")), func() MachineState { m := ready("m1"); m.HasNode = false; return m }()),
			wantAction: ActionCancel, wantMachine: "m2", wantMessage: "before it started; nothing was touched; Machine m1 has no node yet",
		},
		{
			name:       "a cancel annotation on a Machine needing replacement changes nothing",
			state:      held(cancelled(func() MachineState { m := ready("m1"); m.Eligible = false; return m }())),
			wantAction: ActionWait, wantMessage: "needs a replacement",
		},
		{
			name:       "stale in-flight marker of an aligned Machine does not block release",
			state:      func() State { s := held(upToDate("m1")); s.Updating = "m1"; return s }(),
			wantAction: ActionRelease,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Decide(tt.state)
			g.Expect(got.Action).To(Equal(tt.wantAction))
			g.Expect(got.Machine).To(Equal(tt.wantMachine))
			g.Expect(got.Message).To(ContainSubstring(tt.wantMessage))
		})
	}
}

func TestEventNote(t *testing.T) {
	g := NewWithT(t)
	g.Expect(eventNote("short")).To(Equal("short"))
	long := eventNote(string(make([]byte, 5000)))
	g.Expect(len(long)).To(BeNumerically("<=", maxEventNote))
	g.Expect(long).To(HaveSuffix("…"))
}
