package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Phase is the agent's phase for one plan. The happy path is
// Pending -> Staging -> Applying -> Rebooting -> Verifying -> Committed;
// a failure after the node was changed goes RollingBack -> RolledBack, and a plan
// that cannot even start (or a rollback that cannot finish) ends in Failed.
type Phase string

const (
	PhasePending     Phase = "Pending"
	PhaseStaging     Phase = "Staging"
	PhaseApplying    Phase = "Applying"
	PhaseRebooting   Phase = "Rebooting"
	PhaseVerifying   Phase = "Verifying"
	PhaseCommitted   Phase = "Committed"
	PhaseRollingBack Phase = "RollingBack"
	PhaseRolledBack  Phase = "RolledBack"
	PhaseFailed      Phase = "Failed"
)

// Terminal reports whether no further progress happens for this plan without a new plan.
func (p Phase) Terminal() bool {
	return p == PhaseCommitted || p == PhaseRolledBack || p == PhaseFailed
}

// Known reports whether p is one of the defined phases.
func (p Phase) Known() bool {
	switch p {
	case PhasePending, PhaseStaging, PhaseApplying, PhaseRebooting, PhaseVerifying,
		PhaseCommitted, PhaseRollingBack, PhaseRolledBack, PhaseFailed:
		return true
	}
	return false
}

// ReasonDiskFull is the Reason of a status whose plan cannot go on because the
// host's disk is full (the journal or the agent's work directory cannot be
// written, or there is no room for the etcd snapshot). It may come with a
// non-terminal phase: the agent keeps retrying and the plan resumes once there
// is room, but the node must not be left waiting without saying why.
const ReasonDiskFull = "DiskFull"

// Reasons of a Failed phase after which the node is in an unknown or half-changed
// state and needs a human: the coordinator keeps such a node cordoned and reports it
// Degraded (NodeStatus.Broken). The agent sets them (internal/agent/state).
const (
	// ReasonRollbackFailed: a rollback action failed.
	ReasonRollbackFailed = "RollbackFailed"
	// ReasonJournalCorrupt: the agent's journal on the host cannot be read, so the
	// agent cannot know what it did.
	ReasonJournalCorrupt = "JournalCorrupt"
)

// Broken reports whether the status says the node is in an unknown or half-changed
// state (Failed with ReasonRollbackFailed or ReasonJournalCorrupt): such a node is
// never put back in service or reported usable.
func (s NodeStatus) Broken() bool {
	return s.Phase == PhaseFailed && (s.Reason == ReasonRollbackFailed || s.Reason == ReasonJournalCorrupt)
}

// StatusVersion is the version of the NodeStatus envelope.
const StatusVersion = 1

// NodeStatus is what the agent reports about the plan it works on.
type NodeStatus struct {
	// V is the envelope version.
	V int `json:"v"`
	// PlanHash is the hash of the plan this status is about.
	PlanHash string `json:"planHash"`
	// DesiredState is the identity of the desired state that plan carries out
	// (NodePlan.DesiredState); the coordinator takes a Committed status as done
	// only for the identity its Machine's spec asks for. Empty from agents before
	// the field, and while the agent has not opened the plan.
	DesiredState string `json:"desiredState,omitempty"`
	Phase        Phase  `json:"phase"`
	// Step and Steps give progress: step k of n of the plan's actions.
	Step  int `json:"step"`
	Steps int `json:"steps"`
	// Action is the action in progress or last done, e.g. "kubeadm-upgrade".
	Action string `json:"action,omitempty"`
	// Gate is the health gate running while Action is "gates", and, with
	// Reason GateFailed, the gate that did not pass (built-in or user-defined).
	Gate string `json:"gate,omitempty"`
	// Message is a deterministic, human-readable sentence.
	Message string `json:"message,omitempty"`
	// Reason is the machine-readable cause of a RolledBack or Failed phase.
	Reason string `json:"reason,omitempty"`
	// StartedAt and UpdatedAt are RFC 3339 times.
	StartedAt time.Time `json:"startedAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	// EtcdData says, on a RolledBack control-plane node with a single-member etcd,
	// what the rollback did to etcd's data; empty elsewhere.
	EtcdData EtcdDataOutcome `json:"etcdData,omitempty"`
}

// EtcdDataOutcome is what the rollback of a single-member etcd's node did to the
// data (RestoreEtcdOnRollback decides).
type EtcdDataOutcome string

const (
	// EtcdDataRestored: etcd was restored from the snapshot taken when the update
	// started (NodeStatus.StartedAt); every write to the cluster since is lost.
	EtcdDataRestored EtcdDataOutcome = "Restored"
	// EtcdDataKept: etcd kept its data; no write to the cluster was lost.
	EtcdDataKept EtcdDataOutcome = "Kept"
)

// ErrInvalidStatus is wrapped by every decoding error of a status.
var ErrInvalidStatus = errors.New("invalid node status")

// EncodeStatus serialises a status.
func EncodeStatus(s NodeStatus) (string, error) {
	s.V = StatusVersion
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode node status: %w", err)
	}
	return string(b), nil
}

// DecodeStatus parses and validates a status annotation value. The reason must
// be an identifier; messages and names come back bounded (BoundText).
func DecodeStatus(value string) (NodeStatus, error) {
	var s NodeStatus
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return NodeStatus{}, fmt.Errorf("%w: %w", ErrInvalidStatus, err)
	}
	if s.V != StatusVersion {
		return NodeStatus{}, fmt.Errorf("%w: envelope version %d, want %d", ErrInvalidStatus, s.V, StatusVersion)
	}
	if !s.Phase.Known() {
		return NodeStatus{}, fmt.Errorf("%w: unknown phase %.32q", ErrInvalidStatus, s.Phase)
	}
	if s.PlanHash == "" || len(s.PlanHash) > maxHashBytes {
		return NodeStatus{}, fmt.Errorf("%w: planHash %.64q is empty or too long", ErrInvalidStatus, s.PlanHash)
	}
	if s.DesiredState != "" && !hexRE.MatchString(s.DesiredState) {
		return NodeStatus{}, fmt.Errorf("%w: desiredState %.64q is not 32 lowercase hex digits", ErrInvalidStatus, s.DesiredState)
	}
	if s.Steps < 0 || s.Step < 0 || s.Step > s.Steps {
		return NodeStatus{}, fmt.Errorf("%w: step %d of %d", ErrInvalidStatus, s.Step, s.Steps)
	}
	if !validReason(s.Reason) {
		return NodeStatus{}, fmt.Errorf("%w: reason %.64q is not an identifier", ErrInvalidStatus, s.Reason)
	}
	switch s.EtcdData {
	case "", EtcdDataRestored, EtcdDataKept:
	default:
		return NodeStatus{}, fmt.Errorf("%w: etcdData %.32q is neither %s nor %s", ErrInvalidStatus, s.EtcdData, EtcdDataRestored, EtcdDataKept)
	}
	s.Message = BoundText(s.Message, MaxMessageBytes)
	s.Action = BoundText(s.Action, MaxNameBytes)
	s.Gate = BoundText(s.Gate, MaxNameBytes)
	return s, nil
}
