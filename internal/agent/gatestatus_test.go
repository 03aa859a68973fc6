package agent

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestGateStamp: statuses name the gate that runs while the gates action runs
// and the gate that failed after it, for the plan it ran in only.
func TestGateStamp(t *testing.T) {
	g := NewWithT(t)
	var gs gateStamp
	verifying := protocol.NodeStatus{PlanHash: "p1", Phase: protocol.PhaseVerifying, Action: string(state.ActGates), Message: "Verifying: action 8 of 8, gates"}

	s := verifying
	gs.stamp(&s)
	g.Expect(s.Gate).To(BeEmpty(), "no gate started yet")

	gs.gate = "pods-ready"
	s = verifying
	gs.stamp(&s)
	g.Expect(s.Gate).To(Equal("pods-ready"))
	g.Expect(s.Message).To(Equal("Verifying: action 8 of 8, gates: gate pods-ready"))

	rolled := protocol.NodeStatus{PlanHash: "p1", Phase: protocol.PhaseRolledBack, Action: string(state.ActGates), Reason: state.ReasonGateFailed, Message: "rolled back because ..."}
	s = rolled
	gs.stamp(&s)
	g.Expect(s.Gate).To(Equal("pods-ready"), "the failed gate")
	g.Expect(s.Message).To(Equal("rolled back because ..."))

	other := protocol.NodeStatus{PlanHash: "p2", Phase: protocol.PhaseRolledBack, Reason: state.ReasonGateFailed}
	gs.stamp(&other)
	g.Expect(other.Gate).To(BeEmpty(), "another plan's gate is not this one's")

	applying := protocol.NodeStatus{PlanHash: "p2", Phase: protocol.PhaseApplying, Action: "write-files"}
	gs.gate = "x"
	gs.stamp(&applying)
	g.Expect(applying.Gate).To(BeEmpty(), "no gate outside the gates action")
}
