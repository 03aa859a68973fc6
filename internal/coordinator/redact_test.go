package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestCoordinatorMessagesAreRedacted: a failure whose text carries a password hash
// (an agent that does not redact, e.g. an older one, quoting a failed useradd)
// reaches neither the hook answer, nor the Machine's condition, nor the Event.
func TestCoordinatorMessagesAreRedacted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("rd", "v1.35.0", false)
	f.node("rd-peer", "v1.35.0", false)
	m := f.machine("m-rd", "rd", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	c := f.coordinator()
	callUntil(t, c, req, "pick up plan", 3)
	hash := f.getNode("rd").Annotations[inplacev1.DesiredPlanAnnotation]
	const secret = "$6$rounds=4096$saltsalt$Xn3bXv1v0m3u7o8rS3cr3tHashValue"
	f.agentReports("rd", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Reason: "ActionFailed",
		Message: "apply-users failed: useradd -p " + secret + " alice: exit status 1"}, false)

	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("useradd -p " + protocol.Redacted))
	g.Expect(resp.Message).NotTo(ContainSubstring("saltsalt"))
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Message).To(ContainSubstring(protocol.Redacted))
	g.Expect(cond.Message).NotTo(ContainSubstring("saltsalt"))
	g.Expect(f.rec.events).NotTo(BeEmpty())
	for _, e := range f.rec.events {
		g.Expect(e).NotTo(ContainSubstring("saltsalt"))
	}
}
