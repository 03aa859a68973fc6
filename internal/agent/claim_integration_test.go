package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

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

// TestClaimConflictRetriedAtOnce: another writer changes the Node between the
// claim's read and its conditional write (here, before the agent's first PATCH is
// sent, so the real API server answers Conflict). The claim reads again and claims
// within the same call: a conflict used to wait for the agent's 5-s error backoff.
func TestClaimConflictRetriedAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := newNode(t, "claim-conflict", "v1.35.0", false)
	annotate(t, n.name, map[string]any{inplacev1.DesiredPlanAnnotation: "plan-c"})
	var patches atomic.Int32
	cfg := adminConfig(t)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && patches.Add(1) == 1 {
				annotate(t, n.name, map[string]any{"example.com/other-writer": "1"})
			}
			return rt.RoundTrip(req)
		})
	}
	a := &agent.Agent{Client: kubernetes.NewForConfigOrDie(cfg), NodeName: n.name}

	ok, err := agent.ClaimPlan(ctx, a, "plan-c")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(patches.Load()).To(BeNumerically("==", 2), "the first claim conflicted, the second landed")
	stored, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	st, err := protocol.DecodeStatus(stored.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.PlanHash).To(Equal("plan-c"))
	g.Expect(stored.Annotations).To(HaveKeyWithValue("example.com/other-writer", "1"), "the other write stays")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
