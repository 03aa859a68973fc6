package fleet

import (
	"fmt"
	"time"
)

// HoldReason is why a node update is held before cordon; "" lets it start.
type HoldReason string

const (
	HoldNone         HoldReason = ""
	HoldHalted       HoldReason = "Halted"
	HoldWindowClosed HoldReason = "WindowClosed"
	HoldSoaking      HoldReason = "Soaking"
	// HoldWaitingForControlPlane: a worker's update raises its kubelet's version
	// and the cluster's control plane is not at it yet. Gate never answers it: the
	// coordinator decides it from versions (its ControlPlaneGate), and holds with
	// it as with the others (metrics, staging ahead).
	HoldWaitingForControlPlane HoldReason = "WaitingForControlPlane"
)

// GateInput is what the gate sees of one node update that has not started.
type GateInput struct {
	Node string
	Now  time.Time
	// Budget and Counted: the pool's budget and the failures that count against it.
	Budget  Budget
	Counted []Failure
	// Windows and WindowsErr: the pool's schedule, or why it does not parse (a
	// broken schedule holds every node: starting outside the operator's windows
	// is worse than waiting for a fix).
	Windows    Schedule
	WindowsErr error
	// Expected is the node update's expected duration.
	Expected time.Duration
	// Soak: how long the pool's last finished node must stay healthy first;
	// Last is that node (nil: none yet), LastHealthy whether it is Ready now.
	Soak        time.Duration
	Last        *Finished
	LastHealthy bool
}

// Hold is the gate's verdict: Reason "" starts the update; otherwise the hook
// answers in progress with Message and calls again after RetryAfter.
type Hold struct {
	Reason     HoldReason
	Message    string
	RetryAfter time.Duration
}

// Retry intervals of held updates. Cluster API caches the answer for that long
// and does not call again before (not even when the Machine changes), so this is
// how late an operator's resume or window change takes effect: short, since a
// held call only reads.
const (
	retryHalted = 15 * time.Second
	retryWindow = 15 * time.Second
	retrySoak   = 5 * time.Second
)

// Gate decides whether the node's update may start now: the failure budget
// first (a halted pool waits for an operator), then the maintenance window, then
// the soak after the previous node.
func Gate(in GateInput) Hold {
	if halted, msg := in.Budget.Halted(in.Counted); halted {
		return Hold{Reason: HoldHalted, RetryAfter: retryHalted,
			Message: fmt.Sprintf("%s; node %s not started (annotate the Cluster with inplace.capi-inplace.dev/resume to continue)", msg, in.Node)}
	}
	if in.WindowsErr != nil {
		return Hold{Reason: HoldWindowClosed, RetryAfter: retryWindow,
			Message: fmt.Sprintf("node %s not started: the maintenance windows do not parse: %v", in.Node, in.WindowsErr)}
	}
	if v := in.Windows.At(in.Now, in.Expected); !v.Start {
		return Hold{Reason: HoldWindowClosed, RetryAfter: windowRetry(in.Now, v.NextOpening), Message: windowMessage(in, v)}
	}
	if in.Soak > 0 && in.Last != nil && in.Last.Node != in.Node {
		until := in.Last.At.Add(in.Soak)
		if in.Now.Before(until) || !in.LastHealthy {
			msg := fmt.Sprintf("soaking: node %s finished at %s and must stay healthy until %s; node %s not started",
				in.Last.Node, in.Last.At.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339), in.Node)
			if !in.LastHealthy {
				msg = fmt.Sprintf("soaking: node %s, updated last, is not Ready; node %s not started", in.Last.Node, in.Node)
			}
			return Hold{Reason: HoldSoaking, RetryAfter: retrySoak, Message: msg}
		}
	}
	return Hold{}
}

func windowMessage(in GateInput, v WindowVerdict) string {
	why := "the maintenance window is closed"
	if v.Open {
		why = fmt.Sprintf("the maintenance window closes at %s, before the expected %s of the update would end",
			v.Closes.UTC().Format(time.RFC3339), in.Expected)
	}
	next := "no opening within a week is long enough for the expected " + in.Expected.String() +
		" (measured from recent updates; annotate the Cluster with inplace.capi-inplace.dev/resume to forget them)"
	if !v.NextOpening.IsZero() {
		next = "next opening " + v.NextOpening.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("waiting for a maintenance window: %s; %s; node %s not started", why, next, in.Node)
}

// windowRetry calls back at the next opening, at most retryWindow from now (the
// windows may change meanwhile), at least one second.
func windowRetry(now, next time.Time) time.Duration {
	if next.IsZero() {
		return retryWindow
	}
	d := next.Sub(now)
	switch {
	case d < time.Second:
		return time.Second
	case d > retryWindow:
		return retryWindow
	}
	return d
}
