package drain

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestSummary(t *testing.T) {
	tests := []struct {
		name string
		res  Result
		want string
	}{
		{"done", Result{Done: true}, "node drained"},
		{"pdb blocker first, count of the rest", Result{Blockers: []Blocker{
			{Pod: "a/web-1", PDB: "a/web", Reason: "The disruption budget web needs 2 healthy pods and has 2 currently"},
			{Pod: "a/web-2", PDB: "a/web", Reason: "same"},
		}}, "pod a/web-1: eviction blocked by PodDisruptionBudget a/web (The disruption budget web needs 2 healthy pods and has 2 currently) (and 1 more)"},
		{"filter error", Result{Blockers: []Blocker{{Reason: "cannot delete Pods that declare no controller (use --force to override): a/bare"}}},
			"cannot delete Pods that declare no controller (use --force to override): a/bare"},
		{"pod error", Result{Blockers: []Blocker{{Pod: "a/p", Reason: "eviction failed: boom"}}}, "pod a/p: eviction failed: boom"},
		{"terminating, sorted", Result{Terminating: []string{"b/z"}, Evicted: []string{"a/y"}}, "waiting for pod a/y to terminate (and 1 more)"},
		{"waiting on purpose", Result{Waiting: []Blocker{{Pod: "a/batch", Reason: ReasonWaitCompleted}, {Pod: "a/db", Reason: ReasonDrainOrder}}},
			"pod a/batch: waiting for it to complete (drain behavior WaitCompleted) (and 1 more)"},
		{"terminating before waiting", Result{Terminating: []string{"a/web"}, Waiting: []Blocker{{Pod: "a/db", Reason: ReasonDrainOrder}}}, "waiting for pod a/web to terminate"},
		{"nothing known", Result{}, "waiting for pods to leave"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.res.Summary()).To(Equal(tt.want))
		})
	}
}

func TestBudgetNameFromCause(t *testing.T) {
	tests := []struct {
		msg  string
		want string
	}{
		{"The disruption budget web needs 2 healthy pods and has 2 currently", "web"},
		{"The disruption budget db is still being processed by the server.", "db"},
		{"something else", ""},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			g := NewWithT(t)
			m := budgetNameRE.FindStringSubmatch(tt.msg)
			got := ""
			if m != nil {
				got = m[1]
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
