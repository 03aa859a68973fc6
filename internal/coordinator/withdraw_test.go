package coordinator

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestWithdrawalLosesToAPickUp: the coordinator decided to withdraw a plan at the
// pick-up deadline from a read of the Node that predates the agent's claim. The
// withdrawal is conditional on that read, so it conflicts and changes nothing: the
// node stays cordoned with its plan, and the next call sees the agent at work.
// Today's withdrawal landed anyway and uncordoned a node the agent was changing.
func TestWithdrawalLosesToAPickUp(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("wd", "v1.35.0", false)
	f.node("wd-peer", "v1.35.0", false)
	m := f.machine("m-wd", "wd", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := f.coordinator(func(o *Options) { o.Now = func() time.Time { return now } })
	callUntil(t, c, req, "pick up plan", 3)
	stale := f.getNode("wd")
	hash := stale.Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())

	// The agent claims the plan (its first status), after the coordinator's read.
	f.agentReports("wd", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhasePending}, false)
	err := c.abandon(context.Background(), &scope{wc: f.wc, node: stale, planHash: hash})
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
	n := f.getNode("wd")
	g.Expect(n.Spec.Unschedulable).To(BeTrue())
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.PlanNotPickedUpAnnotation))

	now = now.Add(time.Hour)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("to apply plan"))
	g.Expect(f.wl.Get(context.Background(), client.ObjectKey{Name: "wd"}, n)).To(Succeed())
	g.Expect(n.Spec.Unschedulable).To(BeTrue())
}
