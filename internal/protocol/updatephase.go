package protocol

import (
	"encoding/json"
	"time"
)

// UpdatePhase is a phase of a node update as the coordinator times it, in the
// Machine's UpdatePhaseAnnotation (PhaseRecord). The coordinator writes it; the
// views read it (internal/fleet/machinestate: UpdatePhaseStaged).
type UpdatePhase string

const (
	// UpdatePhaseStaging: the node is asked to stage the plan (not cordoned).
	UpdatePhaseStaging UpdatePhase = "Staging"
	// UpdatePhaseStaged: the node staged the plan ahead of a closed maintenance
	// window and the update waits for the window, the node neither cordoned nor
	// changed; no deadline runs (waiting for a window is not staging).
	UpdatePhaseStaged UpdatePhase = "Staged"
	// UpdatePhaseDraining: cordon, drain and publish; bounded by the drain timeout,
	// not by a deadline of its own.
	UpdatePhaseDraining UpdatePhase = "Draining"
	// UpdatePhasePickup: the plan is published; the agent reported nothing for it.
	UpdatePhasePickup UpdatePhase = "PickUp"
	// UpdatePhaseApplying: the agent works on the plan (or on an earlier one).
	UpdatePhaseApplying UpdatePhase = "Applying"
	// UpdatePhaseRebooting: the agent announced a reboot and has not reported since.
	UpdatePhaseRebooting UpdatePhase = "Rebooting"
	// UpdatePhaseVerifying: the agent's gates, then the outside ones (kubelet
	// version, Ready).
	UpdatePhaseVerifying UpdatePhase = "Verifying"
)

// PhaseRecord is the coordinator's clock of one node update (the Machine's
// UpdatePhaseAnnotation, management cluster). Written only by the coordinator.
type PhaseRecord struct {
	Plan  string      `json:"plan"`
	Phase UpdatePhase `json:"phase"`
	// Start is when the update's first phase was recorded, Since when Phase was.
	Start time.Time `json:"start"`
	Since time.Time `json:"since"`
	// Unreachable is when a call first could not reach the workload API during a
	// phase whose clock pauses then; zero otherwise.
	Unreachable time.Time `json:"unreachable,omitzero"`
	// Seen is what the node reported when Phase was recorded, or when it expired.
	Seen string `json:"seen,omitempty"`
	// Expired is when Phase passed its deadline: the verdict stands until the node
	// ends the plan itself, an operator retries, or the plan changes.
	Expired time.Time `json:"expired,omitzero"`
}

// DecodePhaseRecord reads an UpdatePhaseAnnotation; a value that does not decode
// counts as none (the next phase is dated anew).
func DecodePhaseRecord(v string) PhaseRecord {
	var r PhaseRecord
	if v == "" || json.Unmarshal([]byte(v), &r) != nil || r.Plan == "" || r.Since.IsZero() {
		return PhaseRecord{}
	}
	return r
}

// Encode is the annotation value of r.
func (r PhaseRecord) Encode() string {
	b, _ := json.Marshal(r) // a struct of strings and times always encodes
	return string(b)
}
