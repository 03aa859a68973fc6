package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// fleet is the management cluster as the core sees it: each Cluster's progress,
// its blocked reason, and whether a write to it would be refused.
type fleet struct {
	progress map[Key]Progress
	reason   map[Key]string
	blocked  map[Key]string
	refuse   map[Key]string
	fail     map[Key]bool // the write fails for now (NotWritten)
	labels   map[Key]map[string]string
	staged   map[Key]bool // staged and waiting for a maintenance window
}

func newFleet(names ...string) *fleet {
	f := &fleet{progress: map[Key]Progress{}, reason: map[Key]string{}, blocked: map[Key]string{}, refuse: map[Key]string{}, fail: map[Key]bool{},
		labels: map[Key]map[string]string{}, staged: map[Key]bool{}}
	for _, n := range names {
		f.progress[key(n)] = NotStarted
	}
	return f
}

func key(s string) Key {
	ns, n, ok := strings.Cut(s, "/")
	if !ok {
		return Key{"stores", s}
	}
	return Key{ns, n}
}

// observations lists the Clusters in reverse order: the core must not depend on it.
func (f *fleet) observations() []Observation {
	var out []Observation
	for k, p := range f.progress {
		out = append(out, Observation{Key: k, Progress: p, Reason: f.reason[k], Message: f.reason[k], Blocked: f.blocked[k], BlockedMessage: f.blocked[k], Labels: f.labels[k],
			Staged: f.staged[k]})
	}
	return out
}

// step is one pass: change the fleet and the spec, let time pass, run Step and the
// writes it asks for, and check the outcome.
type step struct {
	set     map[string]Progress
	failed  map[string]string // Cluster -> Failed with this reason
	staged  map[string]bool   // Cluster -> staged and waiting for its window, or no longer
	add     []string          // Clusters that join the selection
	remove  []string          // Clusters that leave it
	spec    func(*inplacev1.FleetRolloutSpec)
	advance time.Duration
	lose    bool // the status write of this pass is lost

	wantStart []string
	wantPhase inplacev1.FleetRolloutPhase
	wantHalt  string // reason of the Halted condition; "" means not halted
	check     func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision)
}

func run(t *testing.T, spec inplacev1.FleetRolloutSpec, f *fleet, steps []step) {
	t.Helper()
	g := NewWithT(t)
	now := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	var st inplacev1.FleetRolloutStatus
	for i, s := range steps {
		now = now.Add(s.advance)
		for n, p := range s.set {
			f.progress[key(n)] = p
		}
		for n, v := range s.staged {
			f.staged[key(n)] = v
		}
		for n, r := range s.failed {
			f.progress[key(n)], f.reason[key(n)] = Failed, r
		}
		for _, n := range s.add {
			f.progress[key(n)] = NotStarted
		}
		for _, n := range s.remove {
			delete(f.progress, key(n))
		}
		if s.spec != nil {
			s.spec(&spec)
		}
		d := Step(Input{Name: "stores", Spec: spec, Generation: 1, Status: st, Clusters: f.observations(), Now: now})
		var started []string
		var results []Result
		for _, k := range d.Start {
			started = append(started, k.Name)
			switch {
			case f.refuse[k] != "":
				results = append(results, Result{Key: k, Outcome: Refused, Reason: inplacev1.FleetReasonWouldReplace, Message: f.refuse[k]})
			case f.fail[k]:
				results = append(results, Result{Key: k, Outcome: NotWritten})
			default:
				f.progress[k] = InProgress
				results = append(results, Result{Key: k, Outcome: Written})
			}
		}
		recorded := Record("stores", spec, d.Status, results, now)
		if !s.lose {
			st = recorded
		}
		g.Expect(started).To(Equal(s.wantStart), "step %d: started", i)
		if s.wantPhase != "" {
			g.Expect(recorded.Phase).To(Equal(s.wantPhase), "step %d: phase", i)
		}
		halted := condition(recorded, inplacev1.FleetHaltedCondition)
		if s.wantHalt == "" {
			g.Expect(halted.Status).To(Equal(metav1.ConditionFalse), "step %d: halted: %s", i, halted.Message)
		} else {
			g.Expect(halted.Status).To(Equal(metav1.ConditionTrue), "step %d: halted", i)
			g.Expect(halted.Reason).To(Equal(s.wantHalt), "step %d: halt reason", i)
		}
		g.Expect(recorded.ObservedGeneration).To(Equal(int64(1)))
		c := recorded.Counts
		g.Expect(c.Total).To(Equal(c.Pending+c.Updating+c.Succeeded+c.Failed+c.Skipped), "step %d: counts add up", i)
		if s.check != nil {
			s.check(g, recorded, d)
		}
	}
}

func condition(st inplacev1.FleetRolloutStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

func entry(st inplacev1.FleetRolloutStatus, name string) inplacev1.FleetClusterStatus {
	for _, c := range st.Clusters {
		if (Key{c.Namespace, c.Name}) == key(name) {
			return c
		}
	}
	return inplacev1.FleetClusterStatus{}
}

func hasState(name string, state inplacev1.FleetClusterState, reason string) func(Gomega, inplacev1.FleetRolloutStatus, Decision) {
	return func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
		e := entry(st, name)
		g.Expect(e.State).To(Equal(state), "%s: %s", name, e.Message)
		g.Expect(e.Reason).To(Equal(reason), name)
	}
}

func spec(mod func(*inplacev1.FleetRolloutSpec)) inplacev1.FleetRolloutSpec {
	s := inplacev1.FleetRolloutSpec{
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "stores"}},
		Target:          inplacev1.FleetTarget{Version: "v1.36.0"},
	}
	if mod != nil {
		mod(&s)
	}
	return s
}

func canary(n int32) func(*inplacev1.FleetRolloutSpec) {
	return func(s *inplacev1.FleetRolloutSpec) { s.Canary = &inplacev1.FleetCanary{Count: ptr.To(n)} }
}

func batches(size intstr.IntOrString, more ...func(*inplacev1.FleetRolloutSpec)) func(*inplacev1.FleetRolloutSpec) {
	return func(s *inplacev1.FleetRolloutSpec) {
		s.Strategy.BatchSize = &size
		for _, m := range more {
			m(s)
		}
	}
}

func TestStep(t *testing.T) {
	five := []string{"s1", "s2", "s3", "s4", "s5"}
	tests := []struct {
		name  string
		spec  inplacev1.FleetRolloutSpec
		fleet *fleet
		steps []step
	}{
		{
			name:  "one canary, then batches of two, one batch at a time",
			spec:  spec(batches(intstr.FromInt32(2), canary(1))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}, wantPhase: inplacev1.FleetPhaseProgressing, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.Batches).To(Equal(int32(2)), "canaries, then two batches: the canaries are not counted")
					g.Expect(condition(st, inplacev1.FleetProgressingCondition).Message).To(Equal("canaries, then 2 batches"))
					g.Expect(st.CurrentBatch.Index).To(Equal(int32(0)))
					g.Expect(st.CurrentBatch.Canary).To(BeTrue())
					g.Expect(*entry(st, "s4").Batch).To(Equal(int32(2)))
					g.Expect(st.Counts).To(Equal(inplacev1.FleetCounts{Total: 5, Pending: 4, Updating: 1}))
				}},
				{wantStart: nil, wantPhase: inplacev1.FleetPhaseProgressing},
				{set: map[string]Progress{"s1": Reached}, wantStart: []string{"s2", "s3"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.CurrentBatch.Index).To(Equal(int32(1)))
					g.Expect(st.CurrentBatch.Required).To(Equal(int32(2)))
					g.Expect(condition(st, inplacev1.FleetProgressingCondition).Message).To(Equal("batch 1 of 2"))
				}},
				{set: map[string]Progress{"s2": Reached}, wantStart: nil},
				{set: map[string]Progress{"s3": Reached}, wantStart: []string{"s4", "s5"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(condition(st, inplacev1.FleetProgressingCondition).Message).To(Equal("batch 2 of 2"), "the last batch is batch M of M")
				}},
				{set: map[string]Progress{"s4": Reached, "s5": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.Counts).To(Equal(inplacev1.FleetCounts{Total: 5, Succeeded: 5}))
					g.Expect(condition(st, inplacev1.FleetCompletedCondition).Status).To(Equal(metav1.ConditionTrue))
					g.Expect(condition(st, inplacev1.FleetProgressingCondition).Status).To(Equal(metav1.ConditionFalse))
				}},
			},
		},
		{
			name:  "a failed canary halts before the first batch, whatever the failure budget",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), func(s *inplacev1.FleetRolloutSpec) { s.Strategy.MaxFailures = ptr.To(int32(3)) })),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{failed: map[string]string{"s1": inplacev1.FleetReasonMachineFailed}, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltCanaryFailed,
					check: hasState("s1", inplacev1.FleetClusterFailed, inplacev1.FleetReasonMachineFailed)},
				{advance: time.Hour, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltCanaryFailed},
			},
		},
		{
			name:  "a canary the guard refuses halts too: it proved nothing",
			spec:  spec(batches(intstr.FromInt32(2), canary(1))),
			fleet: func() *fleet { f := newFleet(five...); f.refuse[key("s1")] = "would replace Machine m1"; return f }(),
			steps: []step{
				{wantStart: []string{"s1"}, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltCanaryFailed, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					e := entry(st, "s1")
					g.Expect(e.State).To(Equal(inplacev1.FleetClusterSkipped))
					g.Expect(e.Reason).To(Equal(inplacev1.FleetReasonWouldReplace))
					g.Expect(e.Message).To(Equal("would replace Machine m1"))
					g.Expect(e.StartedAt).To(BeNil())
				}},
				{wantStart: nil, wantHalt: inplacev1.FleetHaltCanaryFailed},
			},
		},
		{
			name: "named canaries, one of them not selected: halts",
			spec: spec(func(s *inplacev1.FleetRolloutSpec) {
				s.Canary = &inplacev1.FleetCanary{Clusters: []string{"stores/s3", "stores/gone"}}
			}),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s3"}, check: hasState("gone", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonNotSelected)},
				{set: map[string]Progress{"s3": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltCanaryFailed},
			},
		},
		{
			name: "the failure budget halts across batches",
			spec: spec(batches(intstr.FromInt32(2), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.MaxFailures = ptr.To(int32(2))
				s.Strategy.SuccessThreshold = ptr.To(intstr.FromString("50%"))
			})),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{failed: map[string]string{"s1": "MachineFailed"}, set: map[string]Progress{"s2": Reached}, wantStart: []string{"s3", "s4"}},
				{failed: map[string]string{"s3": "MachineFailed"}, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltFailureBudget,
					check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
						g.Expect(condition(st, inplacev1.FleetHaltedCondition).Message).To(Equal("2 of 2 failures allowed: stores/s1, stores/s3"))
					}},
				// s4, already updating, goes on; nothing new starts.
				{set: map[string]Progress{"s4": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltFailureBudget},
				// Raising the budget lets it go on: halts are derived, not latched.
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Strategy.MaxFailures = ptr.To(int32(3)) }, wantStart: []string{"s5"}},
			},
		},
		{
			name: "a batch that misses its success threshold halts",
			spec: spec(batches(intstr.FromInt32(4), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.MaxFailures = ptr.To(int32(10))
				s.Strategy.SuccessThreshold = ptr.To(intstr.FromString("75%"))
			})),
			fleet: newFleet("a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "c1"),
			steps: []step{
				{wantStart: []string{"a1", "a2", "a3", "a4"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.CurrentBatch.Required).To(Equal(int32(3)))
				}},
				{failed: map[string]string{"a1": "MachineFailed"}, set: map[string]Progress{"a2": Reached, "a3": Reached, "a4": Reached}, wantStart: []string{"b1", "b2", "b3", "b4"}},
				{failed: map[string]string{"b1": "MachineFailed", "b2": "MachineFailed"}, set: map[string]Progress{"b3": Reached}, wantStart: nil, wantHalt: ""},
				{set: map[string]Progress{"b4": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltSuccessThreshold,
					check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
						g.Expect(condition(st, inplacev1.FleetHaltedCondition).Message).To(Equal("batch 2: 2 of 4 started Clusters succeeded, 3 required"))
					}},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Strategy.SuccessThreshold = ptr.To(intstr.FromInt32(2)) }, wantStart: []string{"c1"}},
			},
		},
		{
			name:  "pause stops new starts; Clusters updating go on; resume starts again",
			spec:  spec(batches(intstr.FromInt32(2), canary(1))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Paused = true }, wantStart: nil, wantPhase: inplacev1.FleetPhasePaused},
				{set: map[string]Progress{"s1": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhasePaused, check: hasState("s1", inplacev1.FleetClusterSucceeded, "")},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Paused = false }, wantStart: []string{"s2", "s3"}, wantPhase: inplacev1.FleetPhaseProgressing},
			},
		},
		{
			name:  "abort skips the Clusters not started and follows the ones updating",
			spec:  spec(batches(intstr.FromInt32(2))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Abort = true }, set: map[string]Progress{"s1": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseAborted,
					check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
						g.Expect(st.Counts).To(Equal(inplacev1.FleetCounts{Total: 5, Succeeded: 1, Updating: 1, Skipped: 3}))
						g.Expect(entry(st, "s5").Reason).To(Equal(inplacev1.FleetReasonAborted))
					}},
				{set: map[string]Progress{"s2": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseAborted, check: hasState("s2", inplacev1.FleetClusterSucceeded, "")},
			},
		},
		{
			name: "a timeout with Abort fails the Cluster and halts",
			spec: spec(batches(intstr.FromInt32(2), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.PerClusterTimeout = &metav1.Duration{Duration: time.Hour}
			})),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: []string{"s1", "s2"}, check: func(g Gomega, _ inplacev1.FleetRolloutStatus, d Decision) {
					g.Expect(d.RequeueAfter).To(Equal(time.Hour))
				}},
				{advance: 40 * time.Minute, set: map[string]Progress{"s1": Reached}, wantStart: nil, check: func(g Gomega, _ inplacev1.FleetRolloutStatus, d Decision) {
					g.Expect(d.RequeueAfter).To(Equal(20 * time.Minute))
				}},
				{advance: 20 * time.Minute, wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltTimeout,
					check: hasState("s2", inplacev1.FleetClusterFailed, inplacev1.FleetReasonTimeout)},
			},
		},
		{
			name: "a timeout with Skip skips the Cluster and the batch goes on",
			spec: spec(batches(intstr.FromInt32(2), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.PerClusterTimeout = &metav1.Duration{Duration: time.Hour}
				s.Strategy.OnTimeout = inplacev1.FleetTimeoutSkip
			})),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{advance: time.Hour, set: map[string]Progress{"s1": Reached}, wantStart: []string{"s3"}, check: hasState("s2", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonTimeout)},
				// It finishes later: the skip stands, the batch already moved on.
				{set: map[string]Progress{"s2": Reached, "s3": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, check: hasState("s2", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonTimeout)},
			},
		},
		{
			name:  "maxConcurrent starts a batch's Clusters as others finish",
			spec:  spec(batches(intstr.FromInt32(4), func(s *inplacev1.FleetRolloutSpec) { s.Strategy.MaxConcurrent = ptr.To(int32(2)) })),
			fleet: newFleet("s1", "s2", "s3", "s4", "s5"),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{set: map[string]Progress{"s2": Reached}, wantStart: []string{"s3"}},
				{set: map[string]Progress{"s1": Reached, "s3": Reached}, wantStart: []string{"s4"}},
				// The next batch waits for the whole batch, not only for a free slot.
				{wantStart: nil},
				{set: map[string]Progress{"s4": Reached}, wantStart: []string{"s5"}},
			},
		},
		{
			name:  "a percentage batch size is of the Clusters after the canaries, rounded up",
			spec:  spec(batches(intstr.FromString("30%"), canary(1))),
			fleet: newFleet("s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "sa"),
			steps: []step{
				{wantStart: []string{"s0"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.Batches).To(Equal(int32(4)), "10 Clusters after the canary in batches of 3")
				}},
				{set: map[string]Progress{"s0": Reached}, wantStart: []string{"s1", "s2", "s3"}},
			},
		},
		{
			name: "Clusters already at the target, blocked, or refused are not waited for",
			spec: spec(batches(intstr.FromInt32(3), canary(1))),
			fleet: func() *fleet {
				f := newFleet("s1", "s2", "s3", "s4", "s5")
				f.progress[key("s1")] = Reached
				f.blocked[key("s3")] = inplacev1.FleetReasonNotGuarded
				f.refuse[key("s4")] = "would replace"
				return f
			}(),
			steps: []step{
				// s1 is at the target: it is not a canary, s2 is.
				{wantStart: []string{"s2"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					hasState("s1", inplacev1.FleetClusterSucceeded, inplacev1.FleetReasonAlreadyAtTarget)(g, st, d)
					hasState("s3", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonNotGuarded)(g, st, d)
					g.Expect(entry(st, "s1").Batch).To(BeNil())
				}},
				{set: map[string]Progress{"s2": Reached}, wantStart: []string{"s4", "s5"}, check: hasState("s4", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonWouldReplace)},
				{set: map[string]Progress{"s5": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(st.Counts).To(Equal(inplacev1.FleetCounts{Total: 5, Succeeded: 3, Skipped: 2}))
				}},
			},
		},
		{
			name: "a write that fails for now is tried again",
			spec: spec(nil),
			fleet: func() *fleet {
				f := newFleet("s1")
				f.fail[key("s1")] = true
				return f
			}(),
			steps: []step{
				{wantStart: []string{"s1"}, check: hasState("s1", inplacev1.FleetClusterPending, "")},
				{wantStart: []string{"s1"}},
			},
		},
		{
			name:  "a Cluster written before the status was (a lost status write) is adopted, not started again",
			spec:  spec(batches(intstr.FromInt32(2))),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{set: map[string]Progress{"s2": InProgress}, wantStart: []string{"s1", "s3"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(entry(st, "s2").State).To(Equal(inplacev1.FleetClusterUpdating))
				}},
			},
		},
		{
			name:  "a canary written but not recorded (a lost status write) is adopted as the canary, not joined by another",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), func(s *inplacev1.FleetRolloutSpec) { s.Paused = true })),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: nil, wantPhase: inplacev1.FleetPhasePaused},
				{set: map[string]Progress{"s1": InProgress}, wantStart: nil, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(entry(st, "s1").State).To(Equal(inplacev1.FleetClusterUpdating))
					g.Expect(*entry(st, "s2").Batch).To(Equal(int32(1)), "one canary only")
				}},
				{set: map[string]Progress{"s1": Reached}, spec: func(s *inplacev1.FleetRolloutSpec) { s.Paused = false }, wantStart: []string{"s2", "s3"}},
			},
		},
		{
			name:  "every status write lost: the canary is adopted on each pass, nothing else starts",
			spec:  spec(batches(intstr.FromInt32(2), canary(1))),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{lose: true, wantStart: []string{"s1"}},
				{lose: true, wantStart: nil},
				{lose: true, wantStart: nil, check: hasState("s1", inplacev1.FleetClusterUpdating, "")},
				{failed: map[string]string{"s1": inplacev1.FleetReasonMachineFailed}, lose: true, wantStart: nil, wantHalt: inplacev1.FleetHaltFailureBudget},
			},
		},
		{
			name:  "a Cluster whose version is reverted fails",
			spec:  spec(func(s *inplacev1.FleetRolloutSpec) { s.Strategy.MaxFailures = ptr.To(int32(5)) }),
			fleet: newFleet("s1"),
			steps: []step{
				{wantStart: []string{"s1"}},
				{set: map[string]Progress{"s1": NotStarted}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, wantHalt: inplacev1.FleetHaltSuccessThreshold,
					check: hasState("s1", inplacev1.FleetClusterFailed, inplacev1.FleetReasonTargetReverted)},
			},
		},
		{
			name:  "Clusters that join go to later batches; started batches keep theirs; leavers are skipped",
			spec:  spec(batches(intstr.FromInt32(2))),
			fleet: newFleet("s2", "s4", "s6"),
			steps: []step{
				{wantStart: []string{"s2", "s4"}},
				// s1 sorts first but batch 1 has started: it waits for a later batch.
				{add: []string{"s1", "s3"}, remove: []string{"s6"}, wantStart: nil, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					g.Expect(*entry(st, "s1").Batch).To(Equal(int32(2)))
					g.Expect(*entry(st, "s3").Batch).To(Equal(int32(2)))
					hasState("s6", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonNotSelected)(g, st, d)
				}},
				{set: map[string]Progress{"s2": Reached, "s4": Reached}, wantStart: []string{"s1", "s3"}},
			},
		},
		{
			name:  "the rollout's order is namespace, then name",
			spec:  spec(batches(intstr.FromInt32(2))),
			fleet: newFleet("b/x", "a/z", "a/y"),
			steps: []step{
				{wantStart: []string{"y", "z"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					var order []string
					for _, c := range st.Clusters {
						order = append(order, c.Namespace+"/"+c.Name)
					}
					g.Expect(order).To(Equal([]string{"a/y", "a/z", "b/x"}))
				}},
			},
		},
		{
			name:  "a long message is cut to the API's bound",
			spec:  spec(nil),
			fleet: func() *fleet { f := newFleet("s1"); f.refuse[key("s1")] = strings.Repeat("é", 1000); return f }(),
			steps: []step{
				{wantStart: []string{"s1"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					m := entry(st, "s1").Message
					g.Expect(len(m)).To(BeNumerically("<=", maxMessage))
					g.Expect(strings.HasSuffix(m, "é...")).To(BeTrue())
				}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, tt.spec, tt.fleet, tt.steps)
		})
	}
}

func TestBatchSizeAndRequired(t *testing.T) {
	tests := []struct {
		name  string
		v     *intstr.IntOrString
		total int
		want  int
	}{
		{"default", nil, 300, 1},
		{"count", ptr.To(intstr.FromInt32(20)), 300, 20},
		{"percentage rounds up", ptr.To(intstr.FromString("10%")), 295, 30},
		{"at least one", ptr.To(intstr.FromString("1%")), 3, 1},
		{"nothing left", ptr.To(intstr.FromString("50%")), 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(batchSize(tt.v, tt.total)).To(Equal(tt.want))
		})
	}

	g := NewWithT(t)
	c := inplacev1.FleetCounts{Succeeded: 7, Failed: 3, Skipped: 5, Total: 15}
	g.Expect(required(nil, c)).To(Equal(int32(10)), "100% of the started, skipped ones left out")
	g.Expect(required(ptr.To(intstr.FromString("75%")), c)).To(Equal(int32(8)))
	g.Expect(required(ptr.To(intstr.FromInt32(50)), c)).To(Equal(int32(10)), "a count is capped at the started Clusters")
}

func approval(mode inplacev1.FleetApprovalMode) func(*inplacev1.FleetRolloutSpec) {
	return func(s *inplacev1.FleetRolloutSpec) { s.Strategy.Approval = &inplacev1.FleetApproval{Mode: mode} }
}

func approve(b int32) func(*inplacev1.FleetRolloutSpec) {
	return func(s *inplacev1.FleetRolloutSpec) { s.ApprovedBatch = ptr.To(b) }
}

// waitsFor checks that the rollout waits for the approval of batch b, and says how.
func waitsFor(b int32) func(Gomega, inplacev1.FleetRolloutStatus, Decision) {
	return func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
		g.Expect(st.WaitingForApproval).To(Equal(ptr.To(b)))
		p := condition(st, inplacev1.FleetProgressingCondition)
		g.Expect(p.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(p.Reason).To(Equal(inplacev1.FleetReasonWaitingForApproval))
		g.Expect(p.Message).To(ContainSubstring(`kubectl patch fleetrollout stores --type merge -p '{"spec":{"approvedBatch":%d}}'`, b))
	}
}

func notWaiting(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
	g.Expect(st.WaitingForApproval).To(BeNil())
}

func TestApproval(t *testing.T) {
	five := []string{"s1", "s2", "s3", "s4", "s5"}
	tests := []struct {
		name  string
		spec  inplacev1.FleetRolloutSpec
		fleet *fleet
		steps []step
	}{
		{
			name:  "every batch: the canaries start at once, each later batch waits for approvedBatch to reach it",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), approval(inplacev1.FleetApprovalEveryBatch))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}, wantPhase: inplacev1.FleetPhaseProgressing, check: notWaiting},
				{set: map[string]Progress{"s1": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseWaitingForApproval, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					waitsFor(1)(g, st, d)
					g.Expect(st.CurrentBatch.Index).To(Equal(int32(0)), "the current batch stays the finished one")
				}},
				{advance: time.Hour, wantStart: nil, wantPhase: inplacev1.FleetPhaseWaitingForApproval, check: waitsFor(1)},
				{spec: approve(1), wantStart: []string{"s2", "s3"}, wantPhase: inplacev1.FleetPhaseProgressing, check: notWaiting},
				// Approving the same batch again changes nothing.
				{spec: approve(1), set: map[string]Progress{"s2": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseProgressing},
				{set: map[string]Progress{"s3": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseWaitingForApproval, check: waitsFor(2)},
				{spec: approve(2), wantStart: []string{"s4", "s5"}},
				{set: map[string]Progress{"s4": Reached, "s5": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, check: notWaiting},
			},
		},
		{
			name:  "every batch without canaries: the first batch needs no approval",
			spec:  spec(batches(intstr.FromInt32(2), approval(inplacev1.FleetApprovalEveryBatch))),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{set: map[string]Progress{"s1": Reached, "s2": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseWaitingForApproval, check: waitsFor(2)},
			},
		},
		{
			name:  "after canaries: one wait, then the batches follow each other",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), approval(inplacev1.FleetApprovalAfterCanaries))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{set: map[string]Progress{"s1": Reached}, wantStart: nil, check: waitsFor(1)},
				{spec: approve(1), wantStart: []string{"s2", "s3"}},
				{set: map[string]Progress{"s2": Reached, "s3": Reached}, wantStart: []string{"s4", "s5"}, check: notWaiting},
			},
		},
		{
			name:  "approved ahead: no wait",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), approval(inplacev1.FleetApprovalEveryBatch), approve(5))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{set: map[string]Progress{"s1": Reached}, wantStart: []string{"s2", "s3"}, check: notWaiting},
			},
		},
		{
			name:  "lowering approvedBatch withdraws the approval of batches not started; started ones go on",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), approval(inplacev1.FleetApprovalEveryBatch), approve(2))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{set: map[string]Progress{"s1": Reached}, wantStart: []string{"s2", "s3"}},
				{spec: approve(1), set: map[string]Progress{"s2": Reached}, wantStart: nil, wantPhase: inplacev1.FleetPhaseProgressing},
				{set: map[string]Progress{"s3": Reached}, wantStart: nil, check: waitsFor(2)},
			},
		},
		{
			name:  "pause and abort work while waiting",
			spec:  spec(batches(intstr.FromInt32(2), canary(1), approval(inplacev1.FleetApprovalEveryBatch))),
			fleet: newFleet(five...),
			steps: []step{
				{wantStart: []string{"s1"}},
				{set: map[string]Progress{"s1": Reached}, wantStart: nil, check: waitsFor(1)},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Paused = true }, wantStart: nil, wantPhase: inplacev1.FleetPhasePaused},
				// Approved while paused: still nothing starts until resumed.
				{spec: approve(1), wantStart: nil, wantPhase: inplacev1.FleetPhasePaused},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Paused, s.ApprovedBatch = false, nil }, wantStart: nil, check: waitsFor(1)},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Abort = true }, wantStart: nil, wantPhase: inplacev1.FleetPhaseAborted, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					notWaiting(g, st, d)
					g.Expect(st.Counts).To(Equal(inplacev1.FleetCounts{Total: 5, Succeeded: 1, Skipped: 4}))
				}},
			},
		},
		{
			name:  "Clusters that left the selection are not waited for",
			spec:  spec(batches(intstr.FromInt32(1), approval(inplacev1.FleetApprovalEveryBatch))),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: []string{"s1"}},
				{remove: []string{"s2"}, set: map[string]Progress{"s1": Reached}, wantStart: nil, check: waitsFor(2)},
				{remove: []string{"s3"}, wantStart: nil, wantPhase: inplacev1.FleetPhaseCompleted, check: notWaiting},
			},
		},
		{
			name: "a halt wins over a wait: the missed threshold is what the operator must see",
			spec: spec(batches(intstr.FromInt32(2), approval(inplacev1.FleetApprovalEveryBatch), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.MaxFailures = ptr.To(int32(5))
			})),
			fleet: newFleet("s1", "s2", "s3"),
			steps: []step{
				{wantStart: []string{"s1", "s2"}},
				{failed: map[string]string{"s1": inplacev1.FleetReasonMachineFailed}, set: map[string]Progress{"s2": Reached}, wantStart: nil,
					wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltSuccessThreshold, check: notWaiting},
				{spec: approve(2), wantStart: nil, wantPhase: inplacev1.FleetPhaseHalted, wantHalt: inplacev1.FleetHaltSuccessThreshold},
				{spec: func(s *inplacev1.FleetRolloutSpec) { s.Strategy.SuccessThreshold = ptr.To(intstr.FromString("50%")) }, wantStart: []string{"s3"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, tt.spec, tt.fleet, tt.steps)
		})
	}
}

func spreadBy(key string, perValue int32) func(*inplacev1.FleetRolloutSpec) {
	return func(s *inplacev1.FleetRolloutSpec) {
		s.Strategy.SpreadBy = &inplacev1.FleetSpread{LabelKey: key, MaxConcurrent: perValue}
	}
}

// sites labels Clusters by site: name -> site; "-" leaves the label off.
func sites(f *fleet, bySite map[string]string) *fleet {
	for n, site := range bySite {
		if site != "-" {
			f.labels[key(n)] = map[string]string{"site": site, "fleet": "stores"}
		} else {
			f.labels[key(n)] = map[string]string{"fleet": "stores"}
		}
	}
	return f
}

func batchOf(g Gomega, st inplacev1.FleetRolloutStatus) map[string]int32 {
	out := map[string]int32{}
	for _, e := range st.Clusters {
		g.Expect(e.Batch).NotTo(BeNil(), e.Name)
		out[e.Name] = *e.Batch
	}
	return out
}

func TestSpreadBy(t *testing.T) {
	tests := []struct {
		name  string
		spec  inplacev1.FleetRolloutSpec
		fleet *fleet
		steps []step
	}{
		{
			name: "one Cluster per site at once; Clusters without the label are one group; an empty value is a value",
			spec: spec(batches(intstr.FromInt32(7), spreadBy("site", 1))),
			fleet: sites(newFleet("s1", "s2", "s3", "s4", "s5", "s6", "s7"),
				map[string]string{"s1": "a", "s2": "a", "s3": "b", "s4": "b", "s5": "-", "s6": "-", "s7": ""}),
			steps: []step{
				{wantStart: []string{"s1", "s3", "s5", "s7"}, check: heldBySpread(3, map[string]string{
					"s2": "1 of at most 1 Clusters with site=a are updating (strategy.spreadBy)",
					"s4": "1 of at most 1 Clusters with site=b are updating (strategy.spreadBy)",
					"s6": "1 of at most 1 Clusters without label site are updating (strategy.spreadBy)",
				})},
				{wantStart: nil, check: heldBySpread(3, nil)},
				{set: map[string]Progress{"s1": Reached, "s5": Reached}, wantStart: []string{"s2", "s6"}, check: heldBySpread(1, map[string]string{
					"s4": "1 of at most 1 Clusters with site=b are updating (strategy.spreadBy)",
				})},
				{set: map[string]Progress{"s3": Reached}, wantStart: []string{"s4"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					heldBySpread(0, nil)(g, st, d)
					hasState("s4", inplacev1.FleetClusterUpdating, "")(g, st, d)
				}},
			},
		},
		{
			name:  "two per site",
			spec:  spec(batches(intstr.FromInt32(5), spreadBy("site", 2))),
			fleet: sites(newFleet("s1", "s2", "s3", "s4", "s5"), map[string]string{"s1": "a", "s2": "a", "s3": "a", "s4": "b", "s5": "b"}),
			steps: []step{
				{wantStart: []string{"s1", "s2", "s4", "s5"}},
				{set: map[string]Progress{"s2": Reached}, wantStart: []string{"s3"}},
			},
		},
		{
			name: "the fleet-wide cap still holds",
			spec: spec(batches(intstr.FromInt32(4), spreadBy("site", 1), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.MaxConcurrent = ptr.To(int32(2))
			})),
			fleet: sites(newFleet("s1", "s2", "s3", "s4"), map[string]string{"s1": "a", "s2": "b", "s3": "c", "s4": "d"}),
			steps: []step{
				// s3 and s4 wait for the fleet-wide cap, not for their sites.
				{wantStart: []string{"s1", "s2"}, check: heldBySpread(0, nil)},
				{set: map[string]Progress{"s1": Reached}, wantStart: []string{"s3"}},
			},
		},
		{
			name:  "Clusters of a batch not started yet are not held back",
			spec:  spec(batches(intstr.FromInt32(2), spreadBy("site", 1))),
			fleet: sites(newFleet("s1", "s2", "s3"), map[string]string{"s1": "a", "s2": "b", "s3": "a"}),
			steps: []step{
				{wantStart: []string{"s1", "s2"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					heldBySpread(0, nil)(g, st, d)
					hasState("s3", inplacev1.FleetClusterPending, "")(g, st, d)
				}},
			},
		},
		{
			name:  "batches are dealt round-robin across sites",
			spec:  spec(batches(intstr.FromInt32(2), spreadBy("site", 1))),
			fleet: sites(newFleet("s1", "s2", "s3", "s4", "s5"), map[string]string{"s1": "a", "s2": "a", "s3": "a", "s4": "b", "s5": "b"}),
			steps: []step{
				{wantStart: []string{"s1", "s4"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(batchOf(g, st)).To(Equal(map[string]int32{"s1": 1, "s4": 1, "s2": 2, "s5": 2, "s3": 3}))
				}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, tt.spec, tt.fleet, tt.steps)
		})
	}
}

// heldBySpread checks the count of Clusters spreadBy holds back, in the rollout's
// and the current batch's counts and in the Progressing message, and the
// message of each named one (reason HeldBySpread).
func heldBySpread(n int32, messages map[string]string) func(Gomega, inplacev1.FleetRolloutStatus, Decision) {
	return func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
		g.Expect(st.Counts.HeldBySpread).To(Equal(n), "held back")
		g.Expect(st.CurrentBatch.Counts.HeldBySpread).To(Equal(n), "held back in the current batch")
		held := 0
		for _, e := range st.Clusters {
			if e.Reason == inplacev1.FleetReasonHeldBySpread {
				held++
				g.Expect(e.State).To(Equal(inplacev1.FleetClusterPending), e.Name)
			}
		}
		g.Expect(held).To(Equal(int(n)), "Clusters named HeldBySpread")
		for name, msg := range messages {
			hasState(name, inplacev1.FleetClusterPending, inplacev1.FleetReasonHeldBySpread)(g, st, Decision{})
			g.Expect(entry(st, name).Message).To(Equal(msg), name)
		}
		progress := condition(st, inplacev1.FleetProgressingCondition).Message
		if n > 0 {
			g.Expect(progress).To(HaveSuffix(fmt.Sprintf("; %d Clusters held back by spreadBy", n)))
		} else {
			g.Expect(progress).NotTo(ContainSubstring("spreadBy"))
		}
	}
}

func TestBatchSizes(t *testing.T) {
	ten := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}
	growing := func(v ...intstr.IntOrString) func(*inplacev1.FleetRolloutSpec) {
		return func(s *inplacev1.FleetRolloutSpec) { s.Strategy.BatchSizes = v }
	}
	tests := []struct {
		name  string
		spec  inplacev1.FleetRolloutSpec
		fleet *fleet
		steps []step
	}{
		{
			name:  "growing sizes, the last one repeated",
			spec:  spec(growing(intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromString("30%"))),
			fleet: newFleet(ten...),
			steps: []step{
				{wantStart: []string{"s0"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(batchOf(g, st)).To(Equal(map[string]int32{
						"s0": 1, "s1": 2, "s2": 2, "s3": 3, "s4": 3, "s5": 3, "s6": 4, "s7": 4, "s8": 4, "s9": 5}))
					g.Expect(st.Batches).To(Equal(int32(5)))
				}},
				{set: map[string]Progress{"s0": Reached}, wantStart: []string{"s1", "s2"}},
			},
		},
		{
			name: "canaries come first; sizes count from batch 1 and percentages of the Clusters after the canaries",
			spec: spec(func(s *inplacev1.FleetRolloutSpec) {
				growing(intstr.FromInt32(2), intstr.FromString("50%"))(s)
				canary(2)(s)
			}),
			fleet: newFleet(ten...),
			steps: []step{
				{wantStart: []string{"s0", "s1"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(batchOf(g, st)).To(Equal(map[string]int32{
						"s0": 0, "s1": 0, "s2": 1, "s3": 1, "s4": 2, "s5": 2, "s6": 2, "s7": 2, "s8": 3, "s9": 3}))
				}},
			},
		},
		{
			name:  "Clusters that join later take the sizes of the batches they land in",
			spec:  spec(growing(intstr.FromInt32(1), intstr.FromInt32(3))),
			fleet: newFleet("s1", "s2"),
			steps: []step{
				{wantStart: []string{"s1"}},
				{add: []string{"s0", "s3", "s4", "s5"}, wantStart: nil, check: func(g Gomega, st inplacev1.FleetRolloutStatus, _ Decision) {
					g.Expect(batchOf(g, st)).To(Equal(map[string]int32{"s1": 1, "s0": 2, "s2": 2, "s3": 2, "s4": 3, "s5": 3}))
				}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, tt.spec, tt.fleet, tt.steps)
		})
	}
}

// TestStagedForWindow: an Updating Cluster whose update is staged ahead of a
// closed maintenance window is marked StagedForWindow and counted, decided
// afresh on every pass; it stays Updating, and perClusterTimeout still runs.
func TestStagedForWindow(t *testing.T) {
	stagedCount := func(n int32, names ...string) func(Gomega, inplacev1.FleetRolloutStatus, Decision) {
		return func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
			g.Expect(st.Counts.StagedForWindow).To(Equal(n), "staged")
			g.Expect(st.CurrentBatch.Counts.StagedForWindow).To(Equal(n), "staged in the current batch")
			for _, name := range names {
				hasState(name, inplacev1.FleetClusterUpdating, inplacev1.FleetReasonStagedForWindow)(g, st, d)
				g.Expect(entry(st, name).Message).To(Equal("staged on its nodes, waiting for a maintenance window to switch them"))
			}
			progress := condition(st, inplacev1.FleetProgressingCondition).Message
			if n > 0 {
				g.Expect(progress).To(HaveSuffix(fmt.Sprintf("; %d Clusters staged, waiting for their maintenance window", n)))
			} else {
				g.Expect(progress).NotTo(ContainSubstring("staged"))
			}
		}
	}
	tests := []struct {
		name  string
		spec  inplacev1.FleetRolloutSpec
		steps []step
	}{
		{
			name: "marked while staged, cleared when the window opens",
			spec: spec(batches(intstr.FromInt32(3))),
			steps: []step{
				{wantStart: []string{"s1", "s2", "s3"}, check: stagedCount(0)},
				{staged: map[string]bool{"s1": true, "s2": true}, check: stagedCount(2, "s1", "s2")},
				{staged: map[string]bool{"s1": false}, set: map[string]Progress{"s2": Reached}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					stagedCount(0)(g, st, d)
					hasState("s1", inplacev1.FleetClusterUpdating, "")(g, st, d)
					hasState("s2", inplacev1.FleetClusterSucceeded, "")(g, st, d)
				}},
			},
		},
		{
			name: "the per-cluster timeout runs while staged",
			spec: spec(batches(intstr.FromInt32(1), func(s *inplacev1.FleetRolloutSpec) {
				s.Strategy.PerClusterTimeout = &metav1.Duration{Duration: time.Hour}
				s.Strategy.OnTimeout = inplacev1.FleetTimeoutSkip
				s.Strategy.MaxFailures = ptr.To(int32(3))
			})),
			steps: []step{
				{wantStart: []string{"s1"}},
				{staged: map[string]bool{"s1": true}, advance: 30 * time.Minute, check: stagedCount(1, "s1")},
				{advance: 31 * time.Minute, wantStart: []string{"s2"}, check: func(g Gomega, st inplacev1.FleetRolloutStatus, d Decision) {
					hasState("s1", inplacev1.FleetClusterSkipped, inplacev1.FleetReasonTimeout)(g, st, d)
					g.Expect(st.Counts.StagedForWindow).To(BeZero())
				}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, tt.spec, newFleet("s1", "s2", "s3"), tt.steps)
		})
	}
}
