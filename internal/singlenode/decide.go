package singlenode

import (
	"fmt"
	"sort"
	"strings"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// MachineState is what the controller observed about one control-plane Machine,
// reduced to what the decision needs.
type MachineState struct {
	Name string
	// UpToDate is KCP's own verdict (controlplane/kubeadm/pkg UpToDate).
	UpToDate bool
	// Eligible is UpToDateResult.EligibleForInPlaceUpdate: false for Machines marked for
	// deletion or remediation, or due for rollout.before/rollout.after, which are
	// replacement requests, not spec changes.
	Eligible bool
	// Complete is true when KCP could compute all three desired objects (the Machine has
	// its KubeadmConfig and an InfraMachine cloned from the KCP's template).
	Complete bool
	// HasNode is true once the Machine has a nodeRef: there is a node to update.
	HasNode bool
	// Deleting is true when the Machine has a deletion timestamp.
	Deleting bool
	// Why lists KCP's condition messages for an outdated Machine.
	Why []string
	// RetryRequested: the Machine carries inplacev1.RetryAnnotation, the one retry
	// request of both paths (docs/operations.md).
	RetryRequested bool
	// CancelRequested: the Machine carries inplacev1.CancelAnnotation, the one
	// cancel request of both paths (docs/operations.md).
	CancelRequested bool
	// FailedTarget is the target of the Machine's failure record
	// (inplacev1.FailedUpdateAnnotation): its node update to that target failed.
	// "" when it has none.
	FailedTarget string
	// FailedReason is the record's condition reason (inplacev1.Reason*).
	FailedReason string
}

// State is what the controller observed about one held KubeadmControlPlane.
type State struct {
	// Held: the KCP carries HoldAnnotation.
	Held bool
	// OptedIn: the owning Cluster still carries the opt-in annotation.
	OptedIn bool
	// BelowThreshold: spec.replicas < 3.
	BelowThreshold bool
	// Target is TargetHash of the KCP's current spec.
	Target string
	// LegacyFailedTarget is the value of the KCP's HoldFailedAnnotation, the failure
	// record of versions before the Machine's ("" when absent).
	LegacyFailedTarget string
	// Updating is the value of HoldUpdatingAnnotation ("" when absent).
	Updating string
	// Machines are the KCP's control-plane Machines.
	Machines []MachineState
}

// failed reports whether the Machine's update to the target failed: its record is
// for that target and the Machine is still outdated (a record a crash left on an
// aligned Machine is about an update that ended as done).
func (m MachineState) failed(target string) bool {
	return m.FailedTarget != "" && m.FailedTarget == target && !m.UpToDate
}

// mayStillCommit reports whether the Machine's failed update ended on a deadline:
// its agent may still commit, as it may on the hook path, where Cluster API keeps
// asking.
func (m MachineState) mayStillCommit() bool {
	return m.FailedReason == inplacev1.ReasonDeadlineExceeded && m.updatable()
}

// updatable reports whether the Machine's node can be updated to the KCP's spec:
// outdated, not being deleted, its desired objects known and a node to update.
func (m MachineState) updatable() bool {
	return !m.UpToDate && !m.Deleting && m.Complete && m.HasNode
}

// Action is what the controller does next for a held KubeadmControlPlane.
type Action string

const (
	// ActionNone: not held, nothing to do.
	ActionNone Action = "None"
	// ActionRelease: remove the hold; KCP finds nothing to roll out (or the operator
	// opted out and takes upstream's behaviour).
	ActionRelease Action = "Release"
	// ActionUpdate: drive the node update of Decision.Machine, then align it.
	ActionUpdate Action = "Update"
	// ActionWait: keep the hold, report why, look again later.
	ActionWait Action = "Wait"
	// ActionKeepFailed: a Machine's update to the current target failed (its
	// record, Decision.Machine); keep the hold and the failure condition until the
	// operator changes, reverts or retries the spec.
	ActionKeepFailed Action = "KeepFailed"
	// ActionRecheck: the current target failed on a deadline; ask the coordinator
	// about Decision.Machine again, as Cluster API keeps asking on the hook path:
	// a commit that came late ends the update as done, anything else keeps the
	// failure as recorded.
	ActionRecheck Action = "Recheck"
	// ActionRetry: the update of Decision.Machine to the current target failed and
	// the operator asked for a retry on it: forget its failure record
	// (FailedUpdateAnnotation), keeping the hold, so that the update runs again; the
	// coordinator withdraws the failed plan and its verdict when it sees the
	// Machine's retry annotation.
	ActionRetry Action = "Retry"
	// ActionMigrateFailure: the KCP carries the failure record of an earlier
	// version (HoldFailedAnnotation): move it onto Decision.Machine, the Machine
	// whose update to the current target it records (none when it is about another
	// target or no Machine is outdated), and remove it from the KCP. Decided before
	// anything else, so that every later decision reads the Machine's record only.
	ActionMigrateFailure Action = "MigrateFailure"
	// ActionCancel: the operator cancelled the update of Decision.Machine (the
	// Machine's cancel annotation) before it started: keep the hold and the pause
	// (releasing would make KCP replace the Machine), start nothing, say so. Not a
	// failure: nothing is recorded, and removing the annotation lets the update
	// start. An update in flight is not cancelled here but by the coordinator,
	// which alone knows whether the agent has begun (ActionUpdate).
	ActionCancel Action = "Cancel"
)

// Decision is Decide's answer.
type Decision struct {
	Action  Action
	Machine string
	Message string
}

// Decide picks the next step for one KubeadmControlPlane. It never chooses an action
// that lets KCP see an outdated Machine while unpaused, except when the operator took
// the opt-in away (or scaled to three replicas), which hands the control plane back
// to upstream's behaviour by design. Machines are handled one at a time in name order,
// and an update in flight is always driven to its end first, so a spec change or an
// opt-out in the middle never leaves a node half-updated (a cancel too: only the
// coordinator can tell whether it came before the agent's first destructive action).
// A Machine whose update the operator cancelled is skipped, as on the hook path, and
// keeps the hold once nothing else is left to do. A failed update is recorded on its
// Machine only (MachineState.FailedTarget): while a Machine's update to the current
// target stands failed, no Machine is updated and the hold stays, until the
// operator retries that Machine or moves the target.
func Decide(s State) Decision {
	if !s.Held {
		return Decision{Action: ActionNone, Message: "not held"}
	}
	machines := append([]MachineState(nil), s.Machines...)
	sort.Slice(machines, func(i, j int) bool { return machines[i].Name < machines[j].Name })
	byName := map[string]MachineState{}
	for _, m := range machines {
		byName[m.Name] = m
	}

	if s.LegacyFailedTarget != "" {
		return Decision{Action: ActionMigrateFailure, Machine: legacyFailedMachine(s, machines),
			Message: "moving the failure recorded on the KubeadmControlPlane to its Machine"}
	}
	if m, ok := byName[s.Updating]; ok && s.Updating != "" && m.updatable() {
		return Decision{Action: ActionUpdate, Machine: m.Name, Message: fmt.Sprintf("continuing the in-place update of Machine %s", m.Name)}
	}
	if !s.OptedIn {
		return Decision{Action: ActionRelease, Message: "the Cluster no longer opts into the single-node control-plane path: KubeadmControlPlane takes over"}
	}
	if !s.BelowThreshold {
		return Decision{Action: ActionRelease, Message: "three or more replicas: KubeadmControlPlane takes over"}
	}
	var failed []MachineState
	for _, m := range machines {
		if m.failed(s.Target) {
			failed = append(failed, m)
		}
	}
	for _, m := range failed {
		if m.RetryRequested && !m.Deleting {
			return Decision{Action: ActionRetry, Machine: m.Name, Message: fmt.Sprintf("retrying the failed in-place update of Machine %s, as its retry annotation asks", m.Name)}
		}
	}
	for _, m := range failed {
		if m.mayStillCommit() {
			return Decision{Action: ActionRecheck, Machine: m.Name, Message: fmt.Sprintf("the in-place update of Machine %s passed a deadline; asking whether its node committed since", m.Name)}
		}
	}
	if len(failed) > 0 {
		m := failed[0]
		return Decision{Action: ActionKeepFailed, Machine: m.Name, Message: fmt.Sprintf("the in-place update of Machine %s to this spec failed (%s); revert or change the spec, or annotate Machine %s with %s",
			m.Name, m.FailedReason, m.Name, inplacev1.RetryAnnotation)}
	}

	var waiting, cancelled []string
	cancelledMachine := ""
	for _, m := range machines {
		if m.UpToDate {
			continue
		}
		switch {
		case m.Deleting:
			waiting = append(waiting, fmt.Sprintf("Machine %s is being deleted", m.Name))
		case !m.Eligible:
			waiting = append(waiting, fmt.Sprintf("Machine %s needs a replacement (%s), which the single-node path never does; remove the opt-in to let KubeadmControlPlane replace it", m.Name, strings.Join(m.Why, "; ")))
		case !m.Complete:
			waiting = append(waiting, fmt.Sprintf("Machine %s has no KubeadmConfig or no infrastructure machine cloned from the KubeadmControlPlane's template", m.Name))
		case !m.HasNode:
			waiting = append(waiting, fmt.Sprintf("Machine %s has no node yet", m.Name))
		case m.CancelRequested:
			if cancelledMachine == "" {
				cancelledMachine = m.Name
			}
			cancelled = append(cancelled, fmt.Sprintf("Machine %s: update cancelled by annotation %s before it started; nothing was touched", m.Name, inplacev1.CancelAnnotation))
		default:
			return Decision{Action: ActionUpdate, Machine: m.Name, Message: fmt.Sprintf("updating Machine %s in place: %s", m.Name, strings.Join(m.Why, "; "))}
		}
	}
	if len(cancelled) > 0 {
		return Decision{Action: ActionCancel, Machine: cancelledMachine, Message: strings.Join(append(cancelled, waiting...), "; ")}
	}
	if len(waiting) > 0 {
		return Decision{Action: ActionWait, Message: strings.Join(waiting, "; ")}
	}
	return Decision{Action: ActionRelease, Message: "every control-plane Machine is up to date"}
}

// legacyFailedMachine is the Machine a legacy HoldFailedAnnotation records a
// failure of: for the current target, the Machine Decide would have updated (the
// first in name order that can be updated and was not cancelled), else the first
// outdated one; "" when the record is about another target or nothing is outdated.
func legacyFailedMachine(s State, sorted []MachineState) string {
	if s.LegacyFailedTarget != s.Target {
		return ""
	}
	for _, m := range sorted {
		if m.updatable() && !m.CancelRequested {
			return m.Name
		}
	}
	for _, m := range sorted {
		if !m.UpToDate && !m.Deleting {
			return m.Name
		}
	}
	return ""
}
