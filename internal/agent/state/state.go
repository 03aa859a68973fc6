package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Reasons reported in NodeStatus.Reason for RolledBack and Failed phases.
const (
	// ReasonActionFailed: an action failed; see the message for which and why.
	ReasonActionFailed = "ActionFailed"
	// ReasonGateFailed: a health gate did not pass before its timeout.
	ReasonGateFailed = "GateFailed"
	// ReasonArtifactRefused: the OS artifact did not match its digest.
	ReasonArtifactRefused = "ArtifactRefused"
	// ReasonRollbackFailed: a rollback action failed; the node needs a human.
	ReasonRollbackFailed = "RollbackFailed"
	// ReasonJournalCorrupt: the agent's journal on the host cannot be read; the
	// agent changes nothing until a human looks at the node.
	ReasonJournalCorrupt = "JournalCorrupt"
	// ReasonInvalidPlan: the plan object could not be decoded or validated.
	ReasonInvalidPlan = "InvalidPlan"
	// ReasonPlanForAnotherNode: the plan names another node.
	ReasonPlanForAnotherNode = "PlanForAnotherNode"
	// ReasonUnknownBackend: the plan names an OS backend this agent does not have.
	ReasonUnknownBackend = "UnknownBackend"
	// ReasonDiskFull: the host's disk has no room for the journal or the work
	// directory (see protocol.ReasonDiskFull).
	ReasonDiskFull = protocol.ReasonDiskFull
	// ReasonVersionUnreachable: the target version cannot be reached from the
	// node's current kubelet version (downgrade or a skew of more than one minor).
	ReasonVersionUnreachable = "VersionUnreachable"
	// ReasonAPIServerNotBack: the update was interrupted on a control plane (a
	// reboot, a power cut) and the node's own API server was not ready by the
	// rescue pod's deadline, so the rescue pod rolled the node back from the
	// journal (RescueWanted).
	ReasonAPIServerNotBack = "APIServerNotBack"
)

// State is the agent's whole memory of one plan. It is persisted by the journal
// after every Step and is all that is needed to resume.
type State struct {
	PlanHash string `json:"planHash,omitempty"`
	// DesiredState is the plan's desired-state identity, reported with every
	// status so that the coordinator knows what a commit was for.
	DesiredState string         `json:"desiredState,omitempty"`
	Phase        protocol.Phase `json:"phase,omitempty"`
	Spec         Spec           `json:"spec"`
	// Actions are the forward actions, in order.
	Actions []Action `json:"actions,omitempty"`
	// Rollback is set once, at the first failure, and never re-derived; a
	// reboot it skips may put a kubelet restart after itself (ImageObserved).
	Rollback []Action `json:"rollback,omitempty"`
	// EtcdMembers is the number of members etcd had when the snapshot was taken
	// (0 before, or without, a snapshot); see DeriveRollback.
	EtcdMembers int `json:"etcdMembers,omitempty"`
	// RebootFrom is the boot ID the node had when the pending reboot was issued.
	RebootFrom string `json:"rebootFrom,omitempty"`
	// ImageBefore is the OS image the node ran when the plan started, as its
	// backend names it (backend.Status.Booted): what a rollback returns to.
	// Empty when the plan boots no new image, the backend could not say, or the
	// journal is from an agent before the field: then a rollback that rebooted
	// forward always reboots back (see ImageObserved).
	ImageBefore string `json:"imageBefore,omitempty"`
	// Reason, FailedAction and Message are the cause of a rollback or failure;
	// FailedGate is the health gate that did not pass (Reason GateFailed), kept
	// here so that an agent restarted during the rollback still names it.
	Reason       string     `json:"reason,omitempty"`
	FailedAction ActionName `json:"failedAction,omitempty"`
	FailedGate   string     `json:"failedGate,omitempty"`
	Message      string     `json:"message,omitempty"`
	// RollbackError is the failure of a rollback action that used up its
	// RollbackAttempts, when there was one.
	RollbackError string `json:"rollbackError,omitempty"`
	// RollbackRetry is the last failure of the rollback action about to run
	// again, while it has attempts left; cleared when it succeeds.
	RollbackRetry string    `json:"rollbackRetry,omitempty"`
	StartedAt     time.Time `json:"startedAt,omitzero"`
}

// Event is an input of Step.
type Event interface{ isEvent() }

// PlanObserved: a valid, admitted plan is desired for this node.
type PlanObserved struct {
	Hash string
	// DesiredState is the plan's desired-state identity (NodePlan.DesiredState).
	DesiredState string
	Spec         Spec
	// ImageBefore is the image the node runs now (State.ImageBefore).
	ImageBefore string
	At          time.Time
}

// PlanRejected: the desired plan cannot be applied at all (see Admit); nothing
// on the node was changed.
type PlanRejected struct {
	Hash    string
	Reason  string
	Message string
	At      time.Time
}

// ActionSucceeded: the current action finished. EtcdMembers is set by
// etcd-snapshot: the member count of the cluster it snapshotted.
type ActionSucceeded struct {
	Name        ActionName
	EtcdMembers int
}

// ActionFailed: the current action failed. Reason is one of the Reason constants.
// Gate is the health gate that did not pass (Reason GateFailed). Unchanged: the
// action failed before it changed anything on the node (kubeadm's preflight), so
// the rollback treats it as never started.
type ActionFailed struct {
	Name      ActionName
	Reason    string
	Message   string
	Gate      string
	Unchanged bool
}

// RebootIssued: the executor is about to reboot the node, which had BootID.
type RebootIssued struct{ BootID string }

// Resumed: the agent (re)started with a journal, on a boot with BootID.
type Resumed struct{ BootID string }

// ImageObserved: the OS backend's report, read when a rollback's reboot is due
// and before it is issued: Booted is the image that runs (backend.Status.Booted),
// Staged the one that boots next when it is another (empty: Booted boots next).
// When the node runs the image it ran before the plan (State.ImageBefore) and
// boots it next, the reboot would only boot the same image again: after GRUB's
// fallback from a new slot that never came up, the agent resumes in the old
// one. Step then records the reboot done and skipped, and puts a kubelet
// restart after it when the restored files need one (restartsKubelet). The
// reboot stays the next action, for the executor to issue, when another image
// runs or boots next, when no image was recorded, and when the rollback
// restores what a boot made effective and only a boot makes effective again:
// the plan's files (any service may have read them when it started: the node
// booted after they were written, or the old image would not run) and the NTP
// client's servers (applying them restarted it).
type ImageObserved struct{ Booted, Staged string }

func (PlanObserved) isEvent()    {}
func (PlanRejected) isEvent()    {}
func (ActionSucceeded) isEvent() {}
func (ActionFailed) isEvent()    {}
func (RebootIssued) isEvent()    {}
func (Resumed) isEvent()         {}
func (ImageObserved) isEvent()   {}

// Output tells the executor what to do after a Step.
type Output struct {
	// Next is the action to perform now; nil when there is none (terminal phase, or
	// waiting for a reboot to happen).
	Next *Action
	// After is how long to wait before performing Next: a rollback action that
	// failed runs again after a pause (RollbackRetryDelay).
	After time.Duration
	// AwaitBoot: a reboot was issued; the executor reboots and waits for Resumed.
	AwaitBoot bool
}

// RollbackAttempts is how many times a rollback action runs before the rollback
// fails and the node is left for a human (ReasonRollbackFailed). Every rollback
// action repeats safely, and the common failures of one are a slow node (the
// kubelet late to stop a static pod, systemd busy restarting the kubelet), which
// a second run past a pause gets over; a node that fails an action three times
// is broken in a way the agent cannot repair.
const RollbackAttempts = 3

// RollbackRetryDelay is the pause before a rollback action's next run after its
// failures-th failure: 30 s, then 60 s, so a rollback spends at most 90 s
// pausing on one action beside the action's own bounded waits.
func RollbackRetryDelay(failures int) time.Duration {
	return time.Duration(failures) * 30 * time.Second
}

var (
	// ErrBusy: another plan is in progress; it finishes (or rolls back) first.
	ErrBusy = errors.New("another plan is in progress")
	// ErrUnexpected: the event does not fit the state (e.g. a result for an action
	// that is not the current one). The state is unchanged.
	ErrUnexpected = errors.New("unexpected event")
)

// Step is the transition function. It never mutates its input.
func Step(s State, e Event) (State, Output, error) {
	s = s.clone()
	switch e := e.(type) {
	case PlanObserved:
		if s.PlanHash == e.Hash {
			return s, s.output(), nil
		}
		if s.PlanHash != "" && !s.Phase.Terminal() {
			return s, s.output(), fmt.Errorf("%w: plan %s is %s", ErrBusy, s.PlanHash, s.Phase)
		}
		n := State{PlanHash: e.Hash, DesiredState: e.DesiredState, Spec: e.Spec, Actions: Derive(e.Spec), ImageBefore: e.ImageBefore, StartedAt: e.At}
		n.Phase = n.phase()
		return n, n.output(), nil
	case PlanRejected:
		if s.PlanHash != "" && !s.Phase.Terminal() && s.PlanHash != e.Hash {
			return s, s.output(), fmt.Errorf("%w: plan %s is %s", ErrBusy, s.PlanHash, s.Phase)
		}
		if s.PlanHash == e.Hash && !s.Phase.Terminal() {
			return s, s.output(), fmt.Errorf("%w: plan %s already started", ErrUnexpected, e.Hash)
		}
		n := State{PlanHash: e.Hash, Phase: protocol.PhaseFailed, Reason: e.Reason, Message: e.Message, StartedAt: e.At}
		return n, Output{}, nil
	case ActionSucceeded:
		cur := s.current()
		if cur == nil || cur.Name != e.Name || cur.Name == ActReboot {
			return s, s.output(), fmt.Errorf("%w: %s succeeded while the current action is %s", ErrUnexpected, e.Name, s.currentName())
		}
		cur.Done = true
		s.RollbackRetry = ""
		if cur.Name == ActEtcdSnapshot && !cur.Rollback {
			s.EtcdMembers = e.EtcdMembers
		}
		s.Phase = s.phase()
		return s, s.output(), nil
	case ActionFailed:
		cur := s.current()
		if cur == nil || cur.Name != e.Name {
			return s, s.output(), fmt.Errorf("%w: %s failed while the current action is %s", ErrUnexpected, e.Name, s.currentName())
		}
		s.RebootFrom = ""
		if s.Phase == protocol.PhaseRollingBack {
			cur.Failures++
			failure := fmt.Sprintf("rollback action %s failed: %s", e.Name, e.Message)
			if cur.Failures < RollbackAttempts {
				s.RollbackRetry = failure
				out := s.output()
				out.After = RollbackRetryDelay(cur.Failures)
				return s, out, nil
			}
			s.RollbackRetry = ""
			s.RollbackError = fmt.Sprintf("%s (%d runs)", failure, cur.Failures)
			s.Phase = protocol.PhaseFailed
			return s, Output{}, nil
		}
		s.Reason, s.FailedAction, s.FailedGate, s.Message = e.Reason, e.Name, e.Gate, e.Message
		started := e.Name
		if e.Unchanged {
			started = ""
		}
		s.Rollback = DeriveRollback(s.Spec, s.Actions, started, s.EtcdMembers)
		s.Phase = s.phase()
		return s, s.output(), nil
	case RebootIssued:
		cur := s.current()
		if cur == nil || cur.Name != ActReboot {
			return s, s.output(), fmt.Errorf("%w: reboot issued while the current action is %s", ErrUnexpected, s.currentName())
		}
		s.RebootFrom = e.BootID
		return s, Output{AwaitBoot: true}, nil
	case Resumed:
		if cur := s.current(); cur != nil && cur.Name == ActReboot && s.RebootFrom != "" && e.BootID != s.RebootFrom {
			cur.Done = true
			s.RebootFrom = ""
			s.Phase = s.phase()
		}
		// Without a new boot ID the reboot did not happen (the agent crashed before
		// it took effect): output() asks for it again.
		s.RebootFrom = ""
		return s, s.output(), nil
	case ImageObserved:
		cur := s.current()
		if cur == nil || cur.Name != ActReboot || !cur.Rollback || s.RebootFrom != "" {
			return s, s.output(), fmt.Errorf("%w: image observed while the current action is %s", ErrUnexpected, s.currentName())
		}
		if !s.rebootNeedless(e) {
			return s, s.output(), nil
		}
		cur.Done, cur.Skipped = true, true
		started, _ := startedActions(s.Actions, s.FailedAction)
		if restartsKubelet(started) {
			s.Rollback = insertAfter(s.Rollback, ActReboot, Action{Name: ActRestartKubelet, Rollback: true})
		}
		s.Phase = s.phase()
		return s, s.output(), nil
	}
	return s, s.output(), fmt.Errorf("%w: %T", ErrUnexpected, e)
}

// rebootNeedless reports whether the rollback's reboot, due now, can be left
// out: the node runs the image it ran before the plan and boots it next, and
// nothing the rollback restores needs a boot to take effect (ImageObserved).
// The failed action counts as started even when it changed nothing: at worst
// the reboot stays, as before the skip existed.
func (s *State) rebootNeedless(e ImageObserved) bool {
	if s.ImageBefore == "" || e.Booted != s.ImageBefore || e.Staged != "" {
		return false
	}
	started, _ := startedActions(s.Actions, s.FailedAction)
	return !started[ActWriteFiles] && !started[ActApplyNTP]
}

// insertAfter returns list with a inserted after its first action named after.
func insertAfter(list []Action, after ActionName, a Action) []Action {
	for i := range list {
		if list[i].Name == after {
			return append(list[:i+1], append([]Action{a}, list[i+1:]...)...)
		}
	}
	return append(list, a)
}

// current returns the first action not done of the active list, or nil.
func (s *State) current() *Action {
	if s.Phase.Terminal() {
		return nil
	}
	list := s.Actions
	if s.Rollback != nil || s.Phase == protocol.PhaseRollingBack {
		list = s.Rollback
	}
	for i := range list {
		if !list[i].Done {
			return &list[i]
		}
	}
	return nil
}

func (s *State) currentName() string {
	if c := s.current(); c != nil {
		return string(c.Name)
	}
	return "none"
}

// phase derives the phase from the lists; it is only called on non-rejected states.
func (s *State) phase() protocol.Phase {
	if s.Reason != "" {
		if s.RollbackError != "" {
			return protocol.PhaseFailed
		}
		if len(s.Rollback) == 0 {
			// Nothing had changed on the node: there is nothing to roll back.
			return protocol.PhaseFailed
		}
		for _, a := range s.Rollback {
			if !a.Done {
				return protocol.PhaseRollingBack
			}
		}
		return protocol.PhaseRolledBack
	}
	for _, a := range s.Actions {
		if !a.Done {
			return phaseOf(a.Name)
		}
	}
	return protocol.PhaseCommitted
}

func (s State) output() Output {
	c := s.current()
	if c == nil {
		return Output{}
	}
	if c.Name == ActReboot && s.RebootFrom != "" {
		return Output{AwaitBoot: true}
	}
	a := *c
	return Output{Next: &a}
}

// rebootNote says in the status message that the rollback skipped its reboot.
func (s State) rebootNote() string {
	for _, a := range s.Rollback {
		if a.Name == ActReboot && a.Skipped {
			return "; not rebooted: the node already ran the image it ran before the update"
		}
	}
	return ""
}

// etcdOutcome is what a rollback did to a single-member etcd's data: restored
// from the snapshot (every write to the cluster since it is gone) or kept; empty
// when the node has no single-member etcd whose snapshot was taken.
func (s State) etcdOutcome() protocol.EtcdDataOutcome {
	for _, a := range s.Rollback {
		if a.Name == ActRestoreEtcd {
			return protocol.EtcdDataRestored
		}
	}
	if s.EtcdMembers == 1 {
		return protocol.EtcdDataKept
	}
	return ""
}

// etcdNote says etcdOutcome in the status message, and why.
func (s State) etcdNote() string {
	why := ""
	if s.Spec.EtcdReason != "" {
		why = " (" + string(s.Spec.EtcdReason) + ")"
	}
	switch s.etcdOutcome() {
	case protocol.EtcdDataRestored:
		at := ""
		if !s.StartedAt.IsZero() {
			at = " at " + s.StartedAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("; etcd was restored from its snapshot taken when the update started%s%s: every write to the cluster since then is lost", at, why)
	case protocol.EtcdDataKept:
		if !s.Spec.KeepEtcd {
			// The policy would have restored, but the update failed before it
			// changed etcd (DeriveRollback): the data is as the update left it.
			why = " (the update failed before it changed etcd)"
		}
		return fmt.Sprintf("; etcd kept its data%s: no write to the cluster was lost", why)
	}
	return ""
}

func (s State) clone() State {
	s.Actions = append([]Action(nil), s.Actions...)
	if s.Rollback != nil {
		s.Rollback = append([]Action{}, s.Rollback...)
	}
	return s
}

// Status renders the state as the status envelope the agent reports. Times other
// than StartedAt are the caller's.
func (s State) Status() protocol.NodeStatus {
	st := protocol.NodeStatus{V: protocol.StatusVersion, PlanHash: s.PlanHash, DesiredState: s.DesiredState, Phase: s.Phase, StartedAt: s.StartedAt}
	list := s.Actions
	if s.Phase == protocol.PhaseRollingBack || s.Phase == protocol.PhaseRolledBack || len(s.Rollback) > 0 {
		list = s.Rollback
	}
	st.Steps = len(list)
	for _, a := range list {
		if a.Done {
			st.Step++
		}
	}
	if c := s.current(); c != nil {
		st.Action = string(c.Name)
	}
	cause := ""
	if s.Reason != "" {
		cause = s.Message
		if s.FailedAction != "" {
			cause = fmt.Sprintf("%s failed: %s", s.FailedAction, s.Message)
		}
	}
	switch s.Phase {
	case protocol.PhaseCommitted:
		st.Message = fmt.Sprintf("committed: Kubernetes %s, %d actions done", s.Spec.Version, st.Steps)
	case protocol.PhaseRollingBack:
		st.Reason = s.Reason
		st.Message = fmt.Sprintf("rolling back (%d of %d, %s) because %s", st.Step+1, st.Steps, st.Action, cause)
		if c := s.current(); c != nil && s.RollbackRetry != "" {
			st.Message += fmt.Sprintf("; running it again (%d of %d runs failed): %s", c.Failures, RollbackAttempts, s.RollbackRetry)
		}
	case protocol.PhaseRolledBack:
		st.Reason = s.Reason
		st.Action = string(s.FailedAction)
		st.Message = fmt.Sprintf("rolled back because %s%s%s", cause, s.etcdNote(), s.rebootNote())
		st.EtcdData = s.etcdOutcome()
	case protocol.PhaseFailed:
		st.Reason = s.Reason
		st.Action = string(s.FailedAction)
		switch {
		case s.RollbackError != "":
			st.Reason = ReasonRollbackFailed
			st.Message = fmt.Sprintf("%s; the update had failed because %s; the node needs manual repair", s.RollbackError, cause)
		case len(s.Actions) == 0:
			st.Message = cause
		default:
			st.Message = fmt.Sprintf("failed before changing the node: %s", cause)
		}
	default:
		st.Message = fmt.Sprintf("%s: action %d of %d, %s", s.Phase, st.Step+1, st.Steps, st.Action)
	}
	if st.Reason == ReasonGateFailed {
		// From the journal, so an agent restarted during the rollback names it too.
		st.Gate = s.FailedGate
	}
	return st
}
