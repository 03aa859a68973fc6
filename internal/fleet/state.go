package fleet

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// maxDurations bounds how many measured update durations the record keeps.
const maxDurations = 5

// Failure is one failed, rolled-back, degraded or not-picked-up node update,
// counted against its pool's failure budget.
type Failure struct {
	Machine string `json:"machine"`
	Node    string `json:"node"`
	// Pool is the policy pool the Machine belonged to ("" for the whole cluster).
	Pool string `json:"pool,omitempty"`
	// Owner is the Machine's owner ("MachineDeployment/md-0") and Spec its
	// desired spec's key when the node failed: a failure whose owner's spec
	// changed since is stale and no longer counts (the budget resets).
	Owner string `json:"owner,omitempty"`
	Spec  string `json:"spec,omitempty"`
	Plan  string `json:"plan"`
	// Cause is a short human text (the agent's reason), never a secret.
	Cause string    `json:"cause"`
	At    time.Time `json:"at"`
}

// Finished is the last node update of a pool that succeeded.
type Finished struct {
	Node string    `json:"node"`
	Plan string    `json:"plan"`
	At   time.Time `json:"at"`
}

// State is the coordinator's fleet record of one Cluster.
type State struct {
	Failures []Failure `json:"failures,omitempty"`
	// LastFinished is keyed by pool.
	LastFinished map[string]Finished `json:"lastFinished,omitempty"`
	// DurationsSeconds are the most recent measured node update durations
	// (cordon to success), newest last.
	DurationsSeconds []int64 `json:"durationsSeconds,omitempty"`
}

// Decode reads the record; an empty string is an empty record.
func Decode(s string) (State, error) {
	var st State
	if s == "" {
		return st, nil
	}
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return State{}, fmt.Errorf("decode fleet state: %w", err)
	}
	return st, nil
}

// Encode writes the record; an empty record is "".
func (s State) Encode() string {
	if len(s.Failures) == 0 && len(s.LastFinished) == 0 && len(s.DurationsSeconds) == 0 {
		return ""
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "" // cannot happen: plain data
	}
	return string(b)
}

// RecordFailure adds f unless the same Machine's plan is already recorded
// (repeated hook calls for one failure count once). It reports a change.
func (s *State) RecordFailure(f Failure) bool {
	for _, cur := range s.Failures {
		if cur.Machine == f.Machine && cur.Plan == f.Plan {
			return false
		}
	}
	s.Failures = append(s.Failures, f)
	return true
}

// Forget drops the Machine's failures (the operator retries it). It reports a change.
func (s *State) Forget(machine string) bool {
	n := len(s.Failures)
	s.Failures = slices.DeleteFunc(s.Failures, func(f Failure) bool { return f.Machine == machine })
	return len(s.Failures) != n
}

// Resume drops every failure and the measured durations (an operator's way out
// of an expectation no window fits). It reports a change.
func (s *State) Resume() bool {
	n := len(s.Failures) + len(s.DurationsSeconds)
	s.Failures, s.DurationsSeconds = nil, nil
	return n > 0
}

// RecordFinished notes a successful node update of pool that took took; the same
// node and plan are recorded once. It reports a change.
func (s *State) RecordFinished(pool, node, plan string, at time.Time, took time.Duration) bool {
	if cur, ok := s.LastFinished[pool]; ok && cur.Node == node && cur.Plan == plan {
		return false
	}
	if s.LastFinished == nil {
		s.LastFinished = map[string]Finished{}
	}
	s.LastFinished[pool] = Finished{Node: node, Plan: plan, At: at.UTC()}
	if took > 0 {
		s.DurationsSeconds = append(s.DurationsSeconds, int64(took.Round(time.Second)/time.Second))
		if len(s.DurationsSeconds) > maxDurations {
			s.DurationsSeconds = s.DurationsSeconds[len(s.DurationsSeconds)-maxDurations:]
		}
	}
	return true
}

// maxExpectedFactor bounds the expectation measured durations can set, as a
// multiple of the pool's own expected duration.
const maxExpectedFactor = 2

// ExpectedDuration is how long the next node update is expected to take: the
// upper median of the recently measured ones, at most maxExpectedFactor times def,
// or def when nothing was measured yet. Not the longest: one update held for hours
// (a drain a PodDisruptionBudget blocks, a node past its deadlines, a paused
// cluster) would otherwise set an expectation no window fits, and with no update
// starting no shorter duration could ever replace it.
func (s State) ExpectedDuration(def time.Duration) time.Duration {
	if len(s.DurationsSeconds) == 0 {
		return def
	}
	d := slices.Clone(s.DurationsSeconds)
	slices.Sort(d)
	measured := time.Duration(d[len(d)/2]) * time.Second
	if def > 0 {
		return min(measured, maxExpectedFactor*def)
	}
	return measured
}
