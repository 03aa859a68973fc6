package fleetrollout

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// EventRecorder is the part of k8s.io/client-go/tools/events.EventRecorder the
// controller uses (a controller-runtime manager's GetEventRecorder fits).
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Actions of the rollout-wide Events (events.k8s.io requires one); the per-Cluster
// and halt Events carry the Cluster's or the halt's reason as their action.
const (
	actionStartBatch = "StartBatch"
	actionComplete   = "Complete"
	actionAbort      = "Abort"
	// actionMultiple is the action of the Event that sums up the Clusters past
	// maxClusterEvents, whose reasons may differ.
	actionMultiple = "Multiple"
)

// maxClusterEvents bounds the per-Cluster Events of one pass: an abort, or a
// namespace that loses its opt-in label, skips thousands of Clusters at once, and
// the status names each of them already. Past the bound, one Event per kind sums
// up the rest.
const maxClusterEvents = 10

// maxEventNote is below the 1,024 characters events.k8s.io/v1 accepts.
const maxEventNote = 1000

// event is one Event to record on the FleetRollout.
type event struct {
	Type, Reason, Action, Note string
}

// transitions compares the status the controller read (prev) with the one it
// wrote (next) and returns the Events of what changed, in order, and the halt
// that began ("" when none did): a batch started, a halt began, changed its
// reason or lifted, the rollout completed or was aborted, Clusters failed or were
// skipped.
// It compares states, not passes: a pass that changes nothing records nothing, and
// a pass whose status write failed records nothing (the next one finds the same
// transitions against the same old status).
func transitions(prev, next inplacev1.FleetRolloutStatus) ([]event, string) {
	var out []event
	if cb := next.CurrentBatch; cb != nil && (prev.CurrentBatch == nil || prev.CurrentBatch.Index != cb.Index) {
		note := fmt.Sprintf("batch %d of %d started: %d Clusters", cb.Index, next.Batches, cb.Counts.Total)
		if cb.Index == 0 {
			note = fmt.Sprintf("the canaries started: %d Clusters, then %d batches", cb.Counts.Total, next.Batches)
		}
		out = append(out, event{corev1.EventTypeNormal, inplacev1.EventBatchStarted, actionStartBatch, note})
	}
	halt := ""
	if r := haltReason(next); r != "" && r != haltReason(prev) {
		halt = r
		out = append(out, event{corev1.EventTypeWarning, inplacev1.EventRolloutHalted, r, r + ": " + haltMessage(next)})
	}
	if was := haltReason(prev); was != "" && haltReason(next) == "" {
		out = append(out, event{corev1.EventTypeNormal, inplacev1.EventRolloutHaltLifted, was, liftNote(was, prev, next)})
	}
	out = append(out, clusterTransitions(prev, next)...)
	c := next.Counts
	if next.Phase == inplacev1.FleetPhaseCompleted && prev.Phase != inplacev1.FleetPhaseCompleted {
		out = append(out, event{corev1.EventTypeNormal, inplacev1.EventRolloutCompleted, actionComplete,
			fmt.Sprintf("%d succeeded, %d failed, %d skipped of %d Clusters", c.Succeeded, c.Failed, c.Skipped, c.Total)})
	}
	if next.Phase == inplacev1.FleetPhaseAborted && prev.Phase != inplacev1.FleetPhaseAborted {
		out = append(out, event{corev1.EventTypeNormal, inplacev1.EventRolloutAborted, actionAbort,
			fmt.Sprintf("aborted: %d Clusters still updating finish by their own rules; %d succeeded, %d failed, %d skipped of %d", c.Updating, c.Succeeded, c.Failed, c.Skipped, c.Total)})
	}
	for i := range out {
		out[i].Note = protocol.BoundText(out[i].Note, maxEventNote)
	}
	return out, halt
}

// clusterTransitions are the Events of the Clusters that became Failed or Skipped
// (or appeared so: a named canary never selected), at most maxClusterEvents of
// them, then one Event per kind for the rest.
func clusterTransitions(prev, next inplacev1.FleetRolloutStatus) []event {
	type key struct{ namespace, name string }
	was := make(map[key]inplacev1.FleetClusterState, len(prev.Clusters))
	for _, e := range prev.Clusters {
		was[key{e.Namespace, e.Name}] = e.State
	}
	var out []event
	more := map[string]int{}
	for _, e := range next.Clusters {
		if e.State != inplacev1.FleetClusterFailed && e.State != inplacev1.FleetClusterSkipped {
			continue
		}
		if s, ok := was[key{e.Namespace, e.Name}]; ok && s == e.State {
			continue
		}
		reason, typ := inplacev1.EventClusterFailed, corev1.EventTypeWarning
		if e.State == inplacev1.FleetClusterSkipped {
			reason = inplacev1.EventClusterSkipped
			if e.Reason == inplacev1.FleetReasonAborted {
				// The operator's own abort: no one needs warning.
				typ = corev1.EventTypeNormal
			}
		}
		if len(out) >= maxClusterEvents {
			more[reason]++
			continue
		}
		action := e.Reason
		if action == "" {
			action = string(e.State)
		}
		note := fmt.Sprintf("%s/%s %s", e.Namespace, e.Name, e.State)
		if e.Reason != "" {
			note += ": " + e.Reason
		}
		if e.Message != "" {
			note += ": " + e.Message
		}
		out = append(out, event{typ, reason, action, note})
	}
	for _, reason := range []string{inplacev1.EventClusterFailed, inplacev1.EventClusterSkipped} {
		if n := more[reason]; n > 0 {
			state := inplacev1.FleetClusterFailed
			if reason == inplacev1.EventClusterSkipped {
				state = inplacev1.FleetClusterSkipped
			}
			out = append(out, event{corev1.EventTypeWarning, reason, actionMultiple,
				fmt.Sprintf("and %d more Clusters %s: status.clusters names each with its reason", n, state)})
		}
	}
	return out
}

func haltMessage(st inplacev1.FleetRolloutStatus) string {
	for _, c := range st.Conditions {
		if c.Type == inplacev1.FleetHaltedCondition {
			return c.Message
		}
	}
	return ""
}

// liftNote says which halt lifted, what it was, what the rollout does now and
// whether a spec change lifted it: a halt lifts when the operator raised
// maxFailures, lowered successThreshold or switched onTimeout to Skip (a new
// generation), or when the Clusters' states no longer meet it (the same one).
func liftNote(was string, prev, next inplacev1.FleetRolloutStatus) string {
	note := fmt.Sprintf("%s lifted", was)
	if m := haltMessage(prev); m != "" {
		note += " (was: " + m + ")"
	}
	if next.ObservedGeneration != prev.ObservedGeneration {
		note += fmt.Sprintf(" by spec generation %d", next.ObservedGeneration)
	}
	if next.Phase != "" {
		note += fmt.Sprintf("; phase %s", next.Phase)
	}
	return note
}
