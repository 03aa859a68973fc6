package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func annotate(t *testing.T, node string, ann map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWithdrawnPlanIsNotStarted: the agent's copy of the Node may still name a plan
// the coordinator has withdrawn at the pick-up deadline (and put the node back in
// service). The claim reads the Node as stored and refuses it, writing nothing; a
// plan still desired is claimed with a status for it, which the coordinator then
// sees before any withdrawal. Today's agent started a withdrawn plan from its stale
// copy.
func TestWithdrawnPlanIsNotStarted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := newNode(t, "claim-1", "v1.35.0", false)
	a := &agent.Agent{Client: client, NodeName: n.name}

	annotate(t, n.name, map[string]any{inplacev1.DesiredPlanAnnotation: nil, inplacev1.PlanNotPickedUpAnnotation: "plan-a"})
	ok, err := agent.ClaimPlan(ctx, a, "plan-a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse(), "withdrawn: not started")
	stored, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stored.Annotations).NotTo(HaveKey(inplacev1.StatusAnnotation), "nothing reported for a withdrawn plan")

	annotate(t, n.name, map[string]any{inplacev1.DesiredPlanAnnotation: "plan-b"})
	for range 2 { // idempotent
		ok, err = agent.ClaimPlan(ctx, a, "plan-b")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ok).To(BeTrue())
	}
	stored, err = client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	st, err := protocol.DecodeStatus(stored.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.PlanHash).To(Equal("plan-b"))
	g.Expect(st.Phase).To(Equal(protocol.PhasePending))
}
