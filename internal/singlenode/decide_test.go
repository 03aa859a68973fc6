package singlenode

import (
	"testing"

	. "github.com/onsi/gomega"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
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

// failedOn is m with a failure record (FailedUpdateAnnotation) for target.
func failedOn(m MachineState, target, reason string) MachineState {
	m.FailedTarget, m.FailedReason = target, reason
	return m
}

// retried is m with the Machine's retry annotation.
func retried(m MachineState) MachineState {
	m.RetryRequested = true
	return m
}

func withoutNode(m MachineState) MachineState {
	m.HasNode = false
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
			name:       "the Machine's failure record of the target keeps the hold",
			state:      held(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack)),
			wantAction: ActionKeepFailed, wantMachine: "m1",
		},
		{
			name:       "failed on a deadline: the Machine's update is asked about again",
			state:      held(upToDate("m0"), failedOn(ready("m1"), "t2", inplacev1.ReasonDeadlineExceeded)),
			wantAction: ActionRecheck, wantMachine: "m1",
		},
		{
			name:       "failed on a deadline, the Machine without a node: nothing to ask",
			state:      held(failedOn(withoutNode(ready("m1")), "t2", inplacev1.ReasonDeadlineExceeded)),
			wantAction: ActionKeepFailed, wantMachine: "m1",
		},
		{
			name:       "failed on a deadline, a retry asked for: retried",
			state:      held(retried(failedOn(ready("m1"), "t2", inplacev1.ReasonDeadlineExceeded))),
			wantAction: ActionRetry, wantMachine: "m1",
		},
		{
			name:       "failed with the Machine's retry annotation is retried",
			state:      held(upToDate("m0"), retried(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack))),
			wantAction: ActionRetry, wantMachine: "m1",
		},
		{
			name:       "a retry annotation on an up-to-date Machine retries nothing",
			state:      held(retried(upToDate("m0")), failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack)),
			wantAction: ActionKeepFailed, wantMachine: "m1",
		},
		{
			name:       "two replicas: a retry annotation on the Machine that did not fail retries nothing",
			state:      held(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack), retried(ready("m2"))),
			wantAction: ActionKeepFailed, wantMachine: "m1",
		},
		{
			name:       "two replicas: a failed Machine holds the other back",
			state:      held(ready("m1"), failedOn(ready("m2"), "t2", inplacev1.ReasonFailed)),
			wantAction: ActionKeepFailed, wantMachine: "m2",
		},
		{
			name:       "a failure of an older target does not block the new one",
			state:      held(failedOn(ready("m1"), "t1", inplacev1.ReasonRolledBack)),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "reverted spec after a failure: everything up to date is released",
			state:      held(failedOn(upToDate("m1"), "t1", inplacev1.ReasonRolledBack)),
			wantAction: ActionRelease,
		},
		{
			name:       "a record of the target on an aligned Machine (a crash after the late commit) counts for nothing",
			state:      held(failedOn(upToDate("m1"), "t2", inplacev1.ReasonDeadlineExceeded)),
			wantAction: ActionRelease,
		},
		{
			name: "a record beside the in-flight marker (a crash while recording): the update is asked about again",
			state: func() State {
				s := held(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack))
				s.Updating = "m1"
				return s
			}(),
			wantAction: ActionUpdate, wantMachine: "m1",
		},
		{
			name:       "legacy: the KCP's failed target moves to the Machine that was updated",
			state:      func() State { s := held(upToDate("m0"), ready("m1")); s.LegacyFailedTarget = "t2"; return s }(),
			wantAction: ActionMigrateFailure, wantMachine: "m1",
		},
		{
			name:       "legacy, two replicas: not to a cancelled Machine, which was never started",
			state:      func() State { s := held(cancelled(ready("m1")), ready("m2")); s.LegacyFailedTarget = "t2"; return s }(),
			wantAction: ActionMigrateFailure, wantMachine: "m2",
		},
		{
			name:       "legacy, the Machine lost its node since: the first outdated one",
			state:      func() State { s := held(withoutNode(ready("m1"))); s.LegacyFailedTarget = "t2"; return s }(),
			wantAction: ActionMigrateFailure, wantMachine: "m1",
		},
		{
			name:       "legacy of an older target is only removed",
			state:      func() State { s := held(ready("m1")); s.LegacyFailedTarget = "t1"; return s }(),
			wantAction: ActionMigrateFailure,
		},
		{
			name:       "legacy with nothing outdated is only removed",
			state:      func() State { s := held(upToDate("m1")); s.LegacyFailedTarget = "t2"; return s }(),
			wantAction: ActionMigrateFailure,
		},
		{
			name: "legacy goes before an update in flight and an opt-out",
			state: func() State {
				s := held(ready("m1"))
				s.LegacyFailedTarget, s.Updating, s.OptedIn = "t1", "m1", false
				return s
			}(),
			wantAction: ActionMigrateFailure,
		},
		{
			name:       "legacy on a KCP no longer held: nothing",
			state:      State{LegacyFailedTarget: "t2", Target: "t2", Machines: []MachineState{ready("m1")}},
			wantAction: ActionNone,
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
			state:      held(cancelled(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack))),
			wantAction: ActionKeepFailed, wantMachine: "m1",
		},
		{
			name:       "retry and cancel on a failed target: the retry forgets the failure, the cancel then holds",
			state:      held(retried(cancelled(failedOn(ready("m1"), "t2", inplacev1.ReasonRolledBack)))),
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
