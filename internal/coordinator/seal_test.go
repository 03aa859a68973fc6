package coordinator

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// testAgentKey is the key every fixture node's "agent" published (fixture.node).
var testAgentKey = mustKey()

func mustKey() *ecdh.PrivateKey {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// openPlan opens a published plan as the node's agent does.
func openPlan(data []byte) (*protocol.NodePlan, error) {
	return openPlanWith(data, testAgentKey)
}

func openPlanWith(data []byte, key *ecdh.PrivateKey) (*protocol.NodePlan, error) {
	s, err := protocol.DecodeSealedPlan(data)
	if err != nil {
		return nil, err
	}
	return s.Open(key)
}

// TestPlanIsSealedToTheNodeKey: no plan (and no cordon) before the agent published
// its key; the published plan holds nothing of its Secret-sourced content in the
// clear and opens only with the node's key; a new key (host reinstalled) gets the
// same plan sealed again on the next call, under the same hash.
func TestPlanIsSealedToTheNodeKey(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	n := f.node("s1", "v1.35.0", false)
	f.node("s1-peer", "v1.35.0", false)
	// This node's agent has not started yet: no key.
	before := n.DeepCopy()
	delete(n.Annotations, inplacev1.AgentKeyAnnotation)
	g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())

	m := f.machine("m-s1", "s1", "v1.35.0", false)
	g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "creds"},
		Data:       map[string][]byte{"token": []byte("TOP-SECRET-TOKEN")},
	})).To(Succeed())
	cfg := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
		{Path: "/etc/creds/token", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "creds", Key: "token"}}},
	}}}
	req := f.request(m, cfg)
	c := f.coordinator()

	for range 2 {
		resp := call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
		g.Expect(resp.Message).To(Equal("step 1/6: waiting for the agent's key on node s1 (annotation " + inplacev1.AgentKeyAnnotation + "): its plan is sealed to it"))
	}
	got := f.getNode("s1")
	g.Expect(got.Spec.Unschedulable).To(BeFalse(), "not cordoned before the agent can receive a plan")
	g.Expect(got.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	err := f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName("s1")}, &corev1.Secret{})
	g.Expect(client.IgnoreNotFound(err)).To(Succeed())
	g.Expect(err).To(HaveOccurred(), "no plan Secret before the key")

	// The agent starts and publishes its key.
	oldKey := mustKey()
	setKey := func(k *ecdh.PrivateKey) {
		n := f.getNode("s1")
		before := n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[inplacev1.AgentKeyAnnotation] = protocol.FormatAgentKey(k.PublicKey())
		g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())
	}
	setKey(oldKey)
	callUntil(t, c, req, "pick up plan", 5)
	sec := f.planSecret("s1")
	data := sec.Data[inplacev1.PlanSecretDataKey]
	g.Expect(bytes.Contains(data, []byte("TOP-SECRET-TOKEN"))).To(BeFalse(), "Secret-sourced content is not in the clear")
	g.Expect(bytes.Contains(data, []byte("/etc/creds/token"))).To(BeFalse(), "nor any other part of the plan")
	plan, err := openPlanWith(data, oldKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Files).To(ContainElement(protocol.File{Path: "/etc/creds/token", Content: []byte("TOP-SECRET-TOKEN")}))
	hash, _ := plan.Hash()
	g.Expect(f.getNode("s1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
	_, err = openPlan(data)
	g.Expect(err).To(BeAssignableToTypeOf(&protocol.SealedToAnotherKeyError{}), "another node's key does not open it")

	// Published once: calls with the same key write nothing.
	rv := sec.ResourceVersion
	call(c, req)
	g.Expect(f.planSecret("s1").ResourceVersion).To(Equal(rv))

	// The host is reinstalled: a new key. The agent reports the plan sealed to its
	// old key as Pending; the next call seals the same plan to the new key.
	newKey := mustKey()
	setKey(newKey)
	f.agentReports("s1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhasePending, Reason: protocol.ReasonSealedToAnotherKey}, false)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	resealed := f.planSecret("s1")
	g.Expect(resealed.ResourceVersion).NotTo(Equal(rv))
	_, err = openPlanWith(resealed.Data[inplacev1.PlanSecretDataKey], oldKey)
	g.Expect(err).To(BeAssignableToTypeOf(&protocol.SealedToAnotherKeyError{}), "the old key no longer opens it")
	again, err := openPlanWith(resealed.Data[inplacev1.PlanSecretDataKey], newKey)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(plan), "the same plan, under the same hash")
	g.Expect(f.getNode("s1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
}
