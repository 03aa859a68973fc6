package lanekit

import (
	"encoding/json"
	"fmt"
)

// AgentJournal is the node agent's journal on the host (internal/agent/kube.WorkDir;
// the agent's --state-dir default).
const AgentJournal = "/var/lib/capi-inplace/journal.json"

// Journal is the part of the agent's journal (internal/agent/journal.Entry) the
// lanes read on a node: which action is in flight, how often each ran, and the
// state's rollback actions.
type Journal struct {
	Key      string         `json:"key"`
	InFlight string         `json:"inFlight"`
	Runs     map[string]int `json:"runs"`
	Attempt  string         `json:"attempt"`
	State    struct {
		Phase    string          `json:"phase"`
		Rollback []JournalAction `json:"rollback"`
	} `json:"state"`
}

// JournalAction is one action of the state's lists (internal/agent/state.Action).
type JournalAction struct {
	Name string `json:"name"`
	Done bool   `json:"done"`
	// Skipped: recorded done without running (a rollback's reboot into the image
	// that already runs).
	Skipped bool `json:"skipped"`
}

// ParseJournal decodes the journal file's content.
func ParseJournal(data []byte) (Journal, error) {
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return Journal{}, fmt.Errorf("agent journal: %w", err)
	}
	return j, nil
}

// NewNames returns the names of after that are not in before (e.g. the manifest
// backups one kubeadm run leaves).
func NewNames(before, after []string) []string {
	seen := map[string]bool{}
	for _, b := range before {
		seen[b] = true
	}
	var out []string
	for _, a := range after {
		if !seen[a] {
			out = append(out, a)
		}
	}
	return out
}
