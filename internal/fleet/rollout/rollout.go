package rollout

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// Key names a Cluster: its namespace and name.
type Key struct{ Namespace, Name string }

// String is "namespace/name", the form of spec.canary.clusters.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

func keyOf(e *inplacev1.FleetClusterStatus) Key { return Key{e.Namespace, e.Name} }

// Progress is what the management cluster shows of one Cluster against the target.
type Progress string

const (
	// NotStarted: the Cluster does not ask for the target version yet.
	NotStarted Progress = "NotStarted"
	// InProgress: the Cluster asks for the target, not every Machine reached it.
	InProgress Progress = "InProgress"
	// Reached: every Machine of the Cluster runs the target version.
	Reached Progress = "Reached"
	// Failed: the Cluster asks for the target and an update failed (Reason, Message).
	Failed Progress = "Failed"
)

// Observation is one selected Cluster as the management cluster shows it.
type Observation struct {
	Key
	Progress Progress
	// Reason and Message say why Progress is Failed.
	Reason, Message string
	// Blocked, when set, is why the Cluster must not be started (NotGuarded,
	// Unsupported); BlockedMessage says more. A blocked Cluster not started yet is
	// skipped.
	Blocked, BlockedMessage string
	// Labels are the Cluster's labels; strategy.spreadBy groups Clusters by one.
	Labels map[string]string
	// Staged: the Cluster's update (Progress InProgress) is staged on its nodes
	// ahead of a closed maintenance window and waits for it
	// (machinestate.StagedAndWaiting). An Updating Cluster is marked
	// StagedForWindow and counted; nothing else changes (perClusterTimeout runs on).
	Staged bool
}

// Input is one pass of the core.
type Input struct {
	// Name is the FleetRollout's name, for the commands the status suggests.
	Name       string
	Spec       inplacev1.FleetRolloutSpec
	Generation int64
	// Status is the status the last pass wrote (zero on the first).
	Status inplacev1.FleetRolloutStatus
	// Clusters are the Clusters the selectors choose, in any order.
	Clusters []Observation
	Now      time.Time
}

// Decision is the outcome of one pass.
type Decision struct {
	// Start are the Clusters to write the target to now, in order.
	Start []Key
	// Status is the new status, with the Clusters of Start already Updating.
	Status inplacev1.FleetRolloutStatus
	// RequeueAfter, when positive, is when the next per-cluster timeout expires.
	RequeueAfter time.Duration
}

// Defaults of the strategy's optional fields.
const (
	DefaultMaxFailures = 1
	// maxMessage and maxReason are the CRD's bounds on a Cluster's message and reason.
	maxMessage = 1024
	maxReason  = 64
)

// Step decides one pass: it folds the observations into the Clusters' states,
// plans the batches not started yet, moves to the next batch when the current one
// is done, met its threshold and, with strategy.approval, the next one was
// approved, and starts the current batch's Pending Clusters up to maxConcurrent
// and spreadBy's cap per group, unless a halt, pause or abort holds.
func Step(in Input) Decision {
	st := *in.Status.DeepCopy()
	now := metav1.NewTime(in.Now)
	entries := observe(in.Spec, st.Clusters, in.Clusters, st.CurrentBatch, now)

	if in.Spec.Abort {
		for _, e := range entries {
			if e.State == inplacev1.FleetClusterPending {
				finish(e, inplacev1.FleetClusterSkipped, inplacev1.FleetReasonAborted, "the rollout was aborted before this Cluster started", now)
			}
		}
	}
	if st.CurrentBatch == nil {
		assignCanaries(in.Spec, entries)
	}
	groups := spreadGroups(in.Spec.Strategy.SpreadBy, in.Clusters)
	plan(in.Spec.Strategy, entries, st.CurrentBatch, groups)

	var start []Key
	mayStart := !in.Spec.Abort && !in.Spec.Paused
	for mayStart {
		if st.CurrentBatch == nil {
			first, ok := firstBatch(entries)
			if !ok {
				break
			}
			st.CurrentBatch = &inplacev1.FleetBatchStatus{Index: first, Canary: first == 0}
		}
		if h, _ := halt(in.Spec, entries, st.CurrentBatch.Index); h != "" {
			break
		}
		cur := st.CurrentBatch.Index
		if batchDone(entries, cur) {
			if _, wait := awaitingApproval(in.Spec, entries, cur); wait {
				break
			}
			next, ok := nextBatch(entries, cur)
			if !ok {
				break
			}
			st.CurrentBatch = &inplacev1.FleetBatchStatus{Index: next, Canary: next == 0}
			continue
		}
		updating := func(e *inplacev1.FleetClusterStatus) bool { return e.State == inplacev1.FleetClusterUpdating }
		free := math.MaxInt
		if m := in.Spec.Strategy.MaxConcurrent; m != nil {
			free = int(*m) - count(entries, updating)
		}
		perGroup := map[spreadGroup]int{}
		for _, e := range entries {
			if g, ok := groups[keyOf(e)]; ok && updating(e) {
				perGroup[g]++
			}
		}
		perValue := spreadMax(in.Spec.Strategy.SpreadBy)
		for _, e := range sortedPending(entries, func(e *inplacev1.FleetClusterStatus) bool { return inBatch(e, cur) }) {
			if free <= 0 {
				break
			}
			g, spread := groups[keyOf(e)]
			if spread && perGroup[g] >= perValue {
				// A later Cluster of another group may start in its place.
				continue
			}
			e.State, e.StartedAt, e.Reason, e.Message = inplacev1.FleetClusterUpdating, now.DeepCopy(), "", ""
			start = append(start, keyOf(e))
			perGroup[g]++
			free--
		}
		holdBySpread(in.Spec.Strategy.SpreadBy, entries, cur, groups, perGroup)
		break
	}

	st.Clusters = flatten(entries)
	summarise(in.Name, in.Spec, in.Generation, &st, now)
	return Decision{Start: start, Status: st, RequeueAfter: nextTimeout(in.Spec.Strategy, st.Clusters, in.Now)}
}

// Outcome is what writing the target to a Cluster did.
type Outcome int

const (
	// Written: the Cluster asks for the target now.
	Written Outcome = iota
	// Refused: the API server refused the write for good (an admission webhook
	// such as the in-place guard, or validation); never retried.
	Refused
	// NotWritten: the write failed for a reason that may pass (conflict,
	// unreachable API server); the Cluster is Pending again and starts on a later pass.
	NotWritten
)

// Result is what writing the target to one Cluster of Decision.Start did.
type Result struct {
	Key
	Outcome Outcome
	// Reason and Message say why a write was Refused (FleetReasonWouldReplace or
	// FleetReasonWriteInvalid, and the API server's message).
	Reason, Message string
}

// Record folds the results of Decision.Start's writes into status; name and spec
// are Input's.
func Record(name string, spec inplacev1.FleetRolloutSpec, status inplacev1.FleetRolloutStatus, results []Result, now time.Time) inplacev1.FleetRolloutStatus {
	st := *status.DeepCopy()
	t := metav1.NewTime(now)
	byKey := make(map[Key]*inplacev1.FleetClusterStatus, len(st.Clusters))
	for i := range st.Clusters {
		byKey[keyOf(&st.Clusters[i])] = &st.Clusters[i]
	}
	for _, r := range results {
		e, ok := byKey[r.Key]
		if !ok || e.State != inplacev1.FleetClusterUpdating {
			continue
		}
		switch r.Outcome {
		case Refused:
			e.StartedAt = nil
			finish(e, inplacev1.FleetClusterSkipped, r.Reason, r.Message, t)
		case NotWritten:
			e.State, e.StartedAt = inplacev1.FleetClusterPending, nil
		}
	}
	summarise(name, spec, st.ObservedGeneration, &st, t)
	return st
}

// observe folds the observations into the Clusters' states. Clusters that left the
// selection before they finished are skipped; a named canary never selected is
// listed skipped, so that the canaries' batch shows it.
func observe(spec inplacev1.FleetRolloutSpec, prev []inplacev1.FleetClusterStatus, obs []Observation, cur *inplacev1.FleetBatchStatus, now metav1.Time) []*inplacev1.FleetClusterStatus {
	byKey := make(map[Key]*inplacev1.FleetClusterStatus, len(prev)+len(obs))
	var entries []*inplacev1.FleetClusterStatus
	for i := range prev {
		e := prev[i].DeepCopy()
		if e.State == inplacev1.FleetClusterPending && e.Reason == inplacev1.FleetReasonHeldBySpread ||
			e.State == inplacev1.FleetClusterUpdating && e.Reason == inplacev1.FleetReasonStagedForWindow {
			// Decided afresh on every pass (holdBySpread, apply), like a halt.
			e.Reason, e.Message = "", ""
		}
		byKey[keyOf(e)] = e
		entries = append(entries, e)
	}
	seen := make(map[Key]bool, len(obs))
	for _, o := range obs {
		seen[o.Key] = true
		e, ok := byKey[o.Key]
		if !ok {
			e = &inplacev1.FleetClusterStatus{Namespace: o.Namespace, Name: o.Name, State: inplacev1.FleetClusterPending}
			byKey[o.Key] = e
			entries = append(entries, e)
		}
		apply(spec, e, o, cur, now)
	}
	for _, e := range entries {
		if !seen[keyOf(e)] && !terminal(e.State) {
			finish(e, inplacev1.FleetClusterSkipped, inplacev1.FleetReasonNotSelected, "the Cluster is no longer selected", now)
		}
	}
	if cur == nil && spec.Canary != nil {
		for _, name := range spec.Canary.Clusters {
			ns, n, _ := strings.Cut(name, "/")
			k := Key{ns, n}
			if _, ok := byKey[k]; ok {
				continue
			}
			e := &inplacev1.FleetClusterStatus{Namespace: ns, Name: n, Batch: ptrTo(int32(0))}
			finish(e, inplacev1.FleetClusterSkipped, inplacev1.FleetReasonNotSelected, "the canary is not among the selected Clusters", now)
			byKey[k] = e
			entries = append(entries, e)
		}
	}
	return entries
}

// apply moves one Cluster's state by what the management cluster shows of it.
func apply(spec inplacev1.FleetRolloutSpec, e *inplacev1.FleetClusterStatus, o Observation, cur *inplacev1.FleetBatchStatus, now metav1.Time) {
	switch e.State {
	case inplacev1.FleetClusterPending:
		switch {
		case o.Progress == Reached:
			// Nothing to do: it proves nothing about the change, so it leaves its batch.
			e.Batch = nil
			finish(e, inplacev1.FleetClusterSucceeded, inplacev1.FleetReasonAlreadyAtTarget, "every Machine was at the target before the rollout wrote it", now)
			return
		case o.Progress == InProgress || o.Progress == Failed:
			// Written before (a pass whose status write was lost, or a person):
			// adopt it into the batch being worked on.
			e.State, e.StartedAt = inplacev1.FleetClusterUpdating, now.DeepCopy()
			switch {
			case cur != nil && (e.Batch == nil || *e.Batch > cur.Index):
				e.Batch = ptrTo(cur.Index)
			case cur == nil && spec.Canary != nil:
				// Before any batch started only a canary can have been started.
				e.Batch = ptrTo(int32(0))
			case cur == nil:
				e.Batch = ptrTo(int32(1))
			}
		case o.Blocked != "":
			e.Batch = nil
			finish(e, inplacev1.FleetClusterSkipped, o.Blocked, o.BlockedMessage, now)
			return
		default:
			return
		}
	case inplacev1.FleetClusterUpdating:
	default:
		return
	}
	switch o.Progress {
	case Reached:
		finish(e, inplacev1.FleetClusterSucceeded, "", "", now)
	case Failed:
		finish(e, inplacev1.FleetClusterFailed, o.Reason, o.Message, now)
	case NotStarted:
		finish(e, inplacev1.FleetClusterFailed, inplacev1.FleetReasonTargetReverted, "the Cluster no longer asks for "+spec.Target.Version, now)
	case InProgress:
		if d := spec.Strategy.PerClusterTimeout; d != nil && e.StartedAt != nil && !now.Time.Before(e.StartedAt.Add(d.Duration)) {
			msg := fmt.Sprintf("not every Machine reached %s within %s", spec.Target.Version, d.Duration)
			if spec.Strategy.OnTimeout == inplacev1.FleetTimeoutSkip {
				finish(e, inplacev1.FleetClusterSkipped, inplacev1.FleetReasonTimeout, msg, now)
			} else {
				finish(e, inplacev1.FleetClusterFailed, inplacev1.FleetReasonTimeout, msg, now)
			}
			return
		}
		if o.Staged {
			e.Reason, e.Message = inplacev1.FleetReasonStagedForWindow, "staged on its nodes, waiting for a maintenance window to switch them"
		}
	}
}

// assignCanaries puts the canaries in batch 0 before any batch started: the named
// ones that are Pending, or the first count Pending Clusters of the rollout's order.
func assignCanaries(spec inplacev1.FleetRolloutSpec, entries []*inplacev1.FleetClusterStatus) {
	for _, e := range entries {
		if e.State == inplacev1.FleetClusterPending {
			e.Batch = nil
		}
	}
	if spec.Canary == nil {
		return
	}
	if len(spec.Canary.Clusters) > 0 {
		named := make(map[Key]bool, len(spec.Canary.Clusters))
		for _, name := range spec.Canary.Clusters {
			ns, n, _ := strings.Cut(name, "/")
			named[Key{ns, n}] = true
		}
		for _, e := range entries {
			if named[keyOf(e)] && e.State == inplacev1.FleetClusterPending {
				e.Batch = ptrTo(int32(0))
			}
		}
		return
	}
	if spec.Canary.Count == nil {
		return
	}
	// A canary already started (adopted after a lost status write) counts.
	n := int(*spec.Canary.Count) - count(entries, func(e *inplacev1.FleetClusterStatus) bool {
		return e.State != inplacev1.FleetClusterPending && inBatch(e, 0)
	})
	for i, e := range sortedPending(entries, func(*inplacev1.FleetClusterStatus) bool { return true }) {
		if i >= n {
			break
		}
		e.Batch = ptrTo(int32(0))
	}
}

// plan assigns the Pending Clusters outside the started batches (and the
// canaries') to the batches after the current one, in the rollout's order, or
// with strategy.spreadBy round-robin across its groups (spreadOrder).
func plan(s inplacev1.FleetStrategy, entries []*inplacev1.FleetClusterStatus, cur *inplacev1.FleetBatchStatus, groups map[Key]spreadGroup) {
	fixed := int32(0) // the canaries' batch is fixed while it is planned
	if cur != nil {
		fixed = cur.Index
	}
	free := sortedPending(entries, func(e *inplacev1.FleetClusterStatus) bool {
		return e.Batch == nil || *e.Batch > fixed
	})
	if groups != nil {
		free = spreadOrder(free, groups)
	}
	// A percentage is of every Cluster after the canaries that is or was in a batch.
	total := len(free) + count(entries, func(e *inplacev1.FleetClusterStatus) bool {
		return e.Batch != nil && *e.Batch >= 1 && *e.Batch <= fixed
	})
	b, left := fixed+1, sizeOf(s, fixed+1, total)
	for _, e := range free {
		if left == 0 {
			b++
			left = sizeOf(s, b, total)
		}
		e.Batch = ptrTo(b)
		left--
	}
}

// sizeOf is the size of batch b (1 the first after the canaries): batchSizes'
// entry for it (past the list's end, its last), or else batchSize.
func sizeOf(s inplacev1.FleetStrategy, b int32, total int) int {
	if n := len(s.BatchSizes); n > 0 {
		i := min(max(int(b)-1, 0), n-1)
		return batchSize(&s.BatchSizes[i], total)
	}
	return batchSize(s.BatchSize, total)
}

// batchSize is the size of a batch after the canaries: a count, or a
// percentage of total rounded up; at least 1.
func batchSize(v *intstr.IntOrString, total int) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// halt is why no further Cluster may start (a FleetHalt* reason and a message), or "".
func halt(spec inplacev1.FleetRolloutSpec, entries []*inplacev1.FleetClusterStatus, cur int32) (string, string) {
	budget := DefaultMaxFailures
	if m := spec.Strategy.MaxFailures; m != nil && *m >= 1 {
		budget = int(*m)
	}
	var failed []string
	for _, e := range entries {
		if e.State == inplacev1.FleetClusterFailed {
			if e.Reason == inplacev1.FleetReasonTimeout && spec.Strategy.OnTimeout != inplacev1.FleetTimeoutSkip {
				return inplacev1.FleetHaltTimeout, fmt.Sprintf("%s timed out and onTimeout is Abort", keyOf(e))
			}
			failed = append(failed, keyOf(e).String())
		}
	}
	if len(failed) >= budget {
		return inplacev1.FleetHaltFailureBudget, fmt.Sprintf("%d of %d failures allowed: %s", len(failed), budget, list(failed))
	}
	if !batchDone(entries, cur) {
		return "", ""
	}
	c := batchCounts(entries, cur)
	if cur == 0 {
		if c.Succeeded == 0 || c.Succeeded < c.Total {
			return inplacev1.FleetHaltCanaryFailed, fmt.Sprintf("%d of %d canaries succeeded; every canary must", c.Succeeded, c.Total)
		}
		return "", ""
	}
	if need := required(spec.Strategy.SuccessThreshold, c); c.Succeeded < need {
		return inplacev1.FleetHaltSuccessThreshold, fmt.Sprintf("batch %d: %d of %d started Clusters succeeded, %d required", cur, c.Succeeded, c.Succeeded+c.Failed, need)
	}
	return "", ""
}

// required is how many of a batch's started Clusters must succeed: a count (at most
// the started ones), or a percentage of them rounded up; 100% by default.
func required(v *intstr.IntOrString, c inplacev1.FleetCounts) int32 {
	started := int(c.Succeeded + c.Failed + c.Updating)
	if v == nil {
		return int32(started)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, started, true)
	if err != nil {
		return int32(started)
	}
	return int32(min(n, started))
}

func summarise(name string, spec inplacev1.FleetRolloutSpec, generation int64, st *inplacev1.FleetRolloutStatus, now metav1.Time) {
	entries := make([]*inplacev1.FleetClusterStatus, len(st.Clusters))
	for i := range st.Clusters {
		entries[i] = &st.Clusters[i]
	}
	st.ObservedGeneration = generation
	st.Counts = tally(entries, func(*inplacev1.FleetClusterStatus) bool { return true })
	// The canaries are batch 0 and not counted: the last batch is "batch M of M".
	var batches int32
	for _, e := range entries {
		if e.Batch != nil {
			batches = max(batches, *e.Batch)
		}
	}
	st.Batches = batches

	haltReason, haltMessage := "", ""
	st.WaitingForApproval = nil
	if cb := st.CurrentBatch; cb != nil {
		cb.Counts = batchCounts(entries, cb.Index)
		if cb.Index == 0 {
			cb.Required = cb.Counts.Total
		} else {
			cb.Required = required(spec.Strategy.SuccessThreshold, cb.Counts)
		}
		cb.StartedAt = nil
		for _, e := range entries {
			if inBatch(e, cb.Index) && e.StartedAt != nil && (cb.StartedAt == nil || e.StartedAt.Before(cb.StartedAt)) {
				cb.StartedAt = e.StartedAt.DeepCopy()
			}
		}
		haltReason, haltMessage = halt(spec, entries, cb.Index)
		if next, wait := awaitingApproval(spec, entries, cb.Index); wait && haltReason == "" && !spec.Abort {
			st.WaitingForApproval = ptrTo(next)
		}
	} else if r, m := halt(spec, entries, -1); r == inplacev1.FleetHaltFailureBudget || r == inplacev1.FleetHaltTimeout {
		haltReason, haltMessage = r, m
	}

	active := st.Counts.Pending+st.Counts.Updating > 0
	switch {
	case spec.Abort:
		st.Phase = inplacev1.FleetPhaseAborted
	case !active:
		st.Phase = inplacev1.FleetPhaseCompleted
	case haltReason != "":
		st.Phase = inplacev1.FleetPhaseHalted
	case spec.Paused:
		st.Phase = inplacev1.FleetPhasePaused
	case st.WaitingForApproval != nil:
		st.Phase = inplacev1.FleetPhaseWaitingForApproval
	default:
		st.Phase = inplacev1.FleetPhaseProgressing
	}

	setCondition(st, generation, now, inplacev1.FleetHaltedCondition, haltReason != "", cmp.Or(haltReason, inplacev1.FleetReasonNotHalted), haltMessage)
	progressing := st.Phase == inplacev1.FleetPhaseProgressing
	reason, msg := inplacev1.FleetReasonProgressing, ""
	switch st.Phase {
	case inplacev1.FleetPhaseAborted:
		reason = inplacev1.FleetReasonRolloutAborted
		msg = fmt.Sprintf("%d Clusters still updating", st.Counts.Updating)
	case inplacev1.FleetPhaseCompleted:
		reason = inplacev1.FleetReasonCompleted
	case inplacev1.FleetPhaseHalted:
		reason, msg = inplacev1.FleetReasonHalted, haltMessage
	case inplacev1.FleetPhasePaused:
		reason = inplacev1.FleetReasonPaused
		msg = fmt.Sprintf("%d Clusters still updating", st.Counts.Updating)
	case inplacev1.FleetPhaseWaitingForApproval:
		reason = inplacev1.FleetReasonWaitingForApproval
		b := *st.WaitingForApproval
		msg = fmt.Sprintf(`batch %d waits for approval: kubectl patch fleetrollout %s --type merge -p '{"spec":{"approvedBatch":%d}}'`, b, name, b)
	default:
		msg = progressMessage(st)
	}
	setCondition(st, generation, now, inplacev1.FleetProgressingCondition, progressing, reason, msg)
	done := !active
	doneReason := inplacev1.FleetReasonCompleted
	if !done {
		doneReason = inplacev1.FleetReasonInProgress
	}
	setCondition(st, generation, now, inplacev1.FleetCompletedCondition, done, doneReason,
		fmt.Sprintf("%d succeeded, %d failed, %d skipped of %d", st.Counts.Succeeded, st.Counts.Failed, st.Counts.Skipped, st.Counts.Total))
}

// progressMessage is the Progressing condition's message while Progressing: the
// canaries and how many batches follow them, or "batch N of M" (the canaries not
// counted in M), how many Clusters spreadBy holds back and how many are staged
// and wait for their maintenance window.
func progressMessage(st *inplacev1.FleetRolloutStatus) string {
	cb := st.CurrentBatch
	if cb == nil {
		return ""
	}
	msg := fmt.Sprintf("batch %d of %d", cb.Index, st.Batches)
	if cb.Index == 0 {
		msg = fmt.Sprintf("canaries, then %d batches", st.Batches)
	}
	if n := cb.Counts.HeldBySpread; n > 0 {
		msg += fmt.Sprintf("; %d Clusters held back by spreadBy", n)
	}
	if n := cb.Counts.StagedForWindow; n > 0 {
		msg += fmt.Sprintf("; %d Clusters staged, waiting for their maintenance window", n)
	}
	return msg
}

func setCondition(st *inplacev1.FleetRolloutStatus, generation int64, now metav1.Time, typ string, status bool, reason, message string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	c := metav1.Condition{Type: typ, Status: s, Reason: reason, Message: truncate(message, 32768), ObservedGeneration: generation, LastTransitionTime: now}
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			if st.Conditions[i].Status == s {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

// nextTimeout is how long until the first Updating Cluster passes perClusterTimeout.
func nextTimeout(s inplacev1.FleetStrategy, clusters []inplacev1.FleetClusterStatus, now time.Time) time.Duration {
	if s.PerClusterTimeout == nil {
		return 0
	}
	var next time.Duration
	for i := range clusters {
		e := &clusters[i]
		if e.State != inplacev1.FleetClusterUpdating || e.StartedAt == nil {
			continue
		}
		d := max(e.StartedAt.Add(s.PerClusterTimeout.Duration).Sub(now), time.Second)
		if next == 0 || d < next {
			next = d
		}
	}
	return next
}

func firstBatch(entries []*inplacev1.FleetClusterStatus) (int32, bool) {
	return nextBatch(entries, -1)
}

// nextBatch is the lowest batch after cur that holds a Cluster.
func nextBatch(entries []*inplacev1.FleetClusterStatus, cur int32) (int32, bool) {
	next, ok := int32(math.MaxInt32), false
	for _, e := range entries {
		if e.Batch != nil && *e.Batch > cur && *e.Batch < next {
			next, ok = *e.Batch, true
		}
	}
	return next, ok
}

func batchDone(entries []*inplacev1.FleetClusterStatus, b int32) bool {
	return !slices.ContainsFunc(entries, func(e *inplacev1.FleetClusterStatus) bool { return inBatch(e, b) && !terminal(e.State) })
}

func batchCounts(entries []*inplacev1.FleetClusterStatus, b int32) inplacev1.FleetCounts {
	return tally(entries, func(e *inplacev1.FleetClusterStatus) bool { return inBatch(e, b) })
}

func tally(entries []*inplacev1.FleetClusterStatus, in func(*inplacev1.FleetClusterStatus) bool) inplacev1.FleetCounts {
	var c inplacev1.FleetCounts
	for _, e := range entries {
		if !in(e) {
			continue
		}
		c.Total++
		switch e.State {
		case inplacev1.FleetClusterPending:
			c.Pending++
			if e.Reason == inplacev1.FleetReasonHeldBySpread {
				c.HeldBySpread++
			}
		case inplacev1.FleetClusterUpdating:
			c.Updating++
			if e.Reason == inplacev1.FleetReasonStagedForWindow {
				c.StagedForWindow++
			}
		case inplacev1.FleetClusterSucceeded:
			c.Succeeded++
		case inplacev1.FleetClusterFailed:
			c.Failed++
		case inplacev1.FleetClusterSkipped:
			c.Skipped++
		}
	}
	return c
}

func inBatch(e *inplacev1.FleetClusterStatus, b int32) bool { return e.Batch != nil && *e.Batch == b }

func terminal(s inplacev1.FleetClusterState) bool {
	return s == inplacev1.FleetClusterSucceeded || s == inplacev1.FleetClusterFailed || s == inplacev1.FleetClusterSkipped
}

func finish(e *inplacev1.FleetClusterStatus, s inplacev1.FleetClusterState, reason, message string, now metav1.Time) {
	e.State, e.Reason, e.Message, e.FinishedAt = s, truncate(reason, maxReason), truncate(message, maxMessage), now.DeepCopy()
}

func count(entries []*inplacev1.FleetClusterStatus, f func(*inplacev1.FleetClusterStatus) bool) int {
	n := 0
	for _, e := range entries {
		if f(e) {
			n++
		}
	}
	return n
}

// sortedPending are the Pending Clusters that match f, in the rollout's order.
func sortedPending(entries []*inplacev1.FleetClusterStatus, f func(*inplacev1.FleetClusterStatus) bool) []*inplacev1.FleetClusterStatus {
	var out []*inplacev1.FleetClusterStatus
	for _, e := range entries {
		if e.State == inplacev1.FleetClusterPending && f(e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, byName)
	return out
}

func byName(a, b *inplacev1.FleetClusterStatus) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// flatten orders the Clusters as the status lists them: by batch (those in none
// last), then namespace and name.
func flatten(entries []*inplacev1.FleetClusterStatus) []inplacev1.FleetClusterStatus {
	slices.SortFunc(entries, func(a, b *inplacev1.FleetClusterStatus) int {
		ab, bb := int64(math.MaxInt64), int64(math.MaxInt64)
		if a.Batch != nil {
			ab = int64(*a.Batch)
		}
		if b.Batch != nil {
			bb = int64(*b.Batch)
		}
		return cmp.Or(cmp.Compare(ab, bb), byName(a, b))
	})
	out := make([]inplacev1.FleetClusterStatus, len(entries))
	for i, e := range entries {
		out[i] = *e
	}
	return out
}

// list names at most five Clusters.
func list(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + fmt.Sprintf(" and %d more", len(names)-5)
	}
	return strings.Join(names, ", ")
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func ptrTo[T any](v T) *T { return &v }
