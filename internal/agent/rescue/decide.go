package rescue

import (
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Seen is what the rescue saw of the node's own API server.
type Seen int

const (
	// NotProbed: the rescue has not asked it yet.
	NotProbed Seen = iota
	// Ready: it answered ready.
	Ready
	// NotReady: it has not answered ready yet, and the deadline is ahead.
	NotReady
	// PastDeadline: it did not answer ready by the deadline.
	PastDeadline
)

// Verdict is what the rescue does next.
type Verdict int

const (
	// Leave: nothing for the rescue to do on this journal (no update, a
	// finished one, a worker's, or one that has not changed what the node
	// boots into): the pod is removed.
	Leave Verdict = iota
	// Probe: ask the node's API server (again) whether it is ready.
	Probe
	// StandBy: the API server is back, so the agent can start: the journal is
	// left to it, untouched, and the pod stays for the rest of the update.
	StandBy
	// RollBack: roll the update back from the journal, or carry on with the
	// rollback in flight.
	RollBack
)

func (v Verdict) String() string {
	switch v {
	case Leave:
		return "Leave"
	case Probe:
		return "Probe"
	case StandBy:
		return "StandBy"
	case RollBack:
		return "RollBack"
	}
	return "Unknown"
}

// Decide says what the rescue does with the journal's state st, having seen
// the node's API server as seen.
//
// A rollback in flight is finished at once, whatever the API server does: it
// was decided before (by the agent, or by an earlier rescue), every rollback
// action repeats safely, and none needs the API server. An update in flight
// that may have changed what the node boots into is left to the agent when the
// API server answers ready (the agent, started by it, carries on from the
// journal: repeating the action in flight, running the gates) and rolled back
// when it has not by the deadline: nothing else will.
func Decide(st state.State, seen Seen) Verdict {
	switch {
	case !st.RescueWanted():
		return Leave
	case st.Phase == protocol.PhaseRollingBack:
		return RollBack
	}
	switch seen {
	case Ready:
		return StandBy
	case PastDeadline:
		return RollBack
	}
	return Probe
}
