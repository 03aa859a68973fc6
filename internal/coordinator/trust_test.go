package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestForgedRequestsTouchNothing: UpdateMachine is a trigger. A request that names a
// Machine Cluster API has not marked, a namespace that did not opt in, or that
// disagrees with the stored Machine, KubeadmConfig or infrastructure machine answers
// Failure, and the workload cluster is left exactly as it was: no cordon, no plan.
func TestForgedRequestsTouchNothing(t *testing.T) {
	tests := []struct {
		name string
		// forge prepares the fixture and returns the request to send.
		forge func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest
		want  string
	}{
		{
			name: "other cluster",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				// A Cluster the caller would like the plan to be built for.
				g := NewWithT(f.t)
				g.Expect(f.mgmt.Create(f.ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "other"},
					Spec: clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}}})).To(Succeed())
				req := f.request(m, nil)
				req.Desired.Machine.Spec.ClusterName = "other"
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (spec fields spec.clusterName): nothing was done",
		},
		{
			name: "forged kubeadmconfig",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				g := NewWithT(f.t)
				g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c1-ca"},
					Data: map[string][]byte{"tls.key": []byte("PRIVATE KEY")}})).To(Succeed())
				req := f.request(m, nil)
				forged := &unstructured.Unstructured{}
				g.Expect(forged.UnmarshalJSON(req.Desired.BootstrapConfig.Raw)).To(Succeed())
				forged.Object["spec"] = map[string]any{"files": []any{map[string]any{
					"path": "/etc/cron.d/x", "contentFrom": map[string]any{"secret": map[string]any{"name": "c1-ca", "key": "tls.key"}},
				}}}
				b, err := forged.MarshalJSON()
				g.Expect(err).NotTo(HaveOccurred())
				req.Desired.BootstrapConfig.Raw = b
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (the request's bootstrap config m differs from the stored one in spec fields spec.files): nothing was done",
		},
		{
			name: "other kubeadmconfig",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				req := f.request(m, nil)
				forged := &unstructured.Unstructured{}
				NewWithT(f.t).Expect(forged.UnmarshalJSON(req.Desired.BootstrapConfig.Raw)).To(Succeed())
				forged.SetName("someone-elses")
				req.Desired.BootstrapConfig.Raw, _ = forged.MarshalJSON()
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (the request carries bootstrap config KubeadmConfig NS/someone-elses, the stored Machine references KubeadmConfig m): nothing was done",
		},
		{
			name: "forged infra machine",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				req := f.request(m, nil)
				forged := &unstructured.Unstructured{}
				g := NewWithT(f.t)
				g.Expect(forged.UnmarshalJSON(req.Desired.InfrastructureMachine.Raw)).To(Succeed())
				g.Expect(unstructured.SetNestedField(forged.Object, "os-evil", "spec", "image")).To(Succeed())
				req.Desired.InfrastructureMachine.Raw, _ = forged.MarshalJSON()
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (the request's infrastructure machine m differs from the stored one in spec fields spec.image): nothing was done",
		},
		{
			name: "other version",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				req := f.request(m, nil)
				req.Desired.Machine.Spec.Version = "v1.37.0"
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (spec fields spec.version): nothing was done",
		},
		{
			name: "other uid",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				req := f.request(m, nil)
				req.Desired.Machine.UID = "00000000-0000-0000-0000-000000000000"
				return req
			},
			want: "the request disagrees with the stored Machine NS/m (UID 00000000-0000-0000-0000-000000000000, stored ",
		},
		{
			name: "not marked",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				g := NewWithT(f.t)
				stored := &clusterv1.Machine{}
				g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
				delete(stored.Annotations, clusterv1.UpdateInProgressAnnotation)
				delete(stored.Annotations, runtimev1.PendingHooksAnnotation)
				g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
				// The request still claims the marks: only the stored Machine counts.
				req := f.request(m, nil)
				req.Desired.Machine.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: "", runtimev1.PendingHooksAnnotation: "UpdateMachine"}
				return req
			},
			want: "Machine NS/m is not marked for an in-place update by Cluster API (annotation in-place-updates.internal.cluster.x-k8s.io/update-in-progress and UpdateMachine in runtime.cluster.x-k8s.io/pending-hooks): nothing was done",
		},
		{
			name: "hook not pending",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				g := NewWithT(f.t)
				stored := &clusterv1.Machine{}
				g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
				stored.Annotations[runtimev1.PendingHooksAnnotation] = "AfterClusterUpgrade"
				g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
				return f.request(m, nil)
			},
			want: "Machine NS/m is not marked for an in-place update by Cluster API",
		},
		{
			name: "namespace not opted in",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				g := NewWithT(f.t)
				ns := &corev1.Namespace{}
				g.Expect(f.mgmt.Get(f.ctx, client.ObjectKey{Name: f.ns}, ns)).To(Succeed())
				delete(ns.Labels, inplacev1.NamespaceEnabledLabel)
				g.Expect(f.mgmt.Update(f.ctx, ns)).To(Succeed())
				return f.request(m, nil)
			},
			want: "namespace NS has not opted in to in-place updates (label inplace.capi-inplace.dev/enabled=true): nothing was done",
		},
		{
			name: "no such machine",
			forge: func(f *fixture, m *clusterv1.Machine) *runtimehooksv1.UpdateMachineRequest {
				req := f.request(m, nil)
				req.Desired.Machine.Name = "ghost"
				return req
			},
			want: "Machine NS/ghost does not exist",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			node := fmt.Sprintf("forged-%d", i)
			f.node(node, "v1.35.0", false)
			f.node(node+"-peer", "v1.35.0", false)
			m := f.machine("m", node, "v1.36.0", false)
			req := tt.forge(f, m)
			c := f.coordinator()

			for range 2 {
				resp := call(c, req)
				g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure), resp.Message)
				g.Expect(resp.Message).To(HavePrefix(replaceNS(tt.want, f.ns)))
			}
			n := f.getNode(node)
			g.Expect(n.Spec.Unschedulable).To(BeFalse(), "not cordoned")
			g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
			g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
			g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
			err := f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(node)}, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no plan Secret written: %v", err)
			g.Expect(f.rec.reasons()).To(BeEmpty(), "no Event")
		})
	}
}

// TestHonestRequestAfterRefusal: the same fixture with CAPI's request goes ahead,
// so the refusals above are about the forgery, not the fixture.
func TestHonestRequestAfterRefusal(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, dedicatedWorkload(t))
	f.node("n", "v1.35.0", false)
	f.node("n-peer", "v1.35.0", false)
	m := f.machine("m", "n", "v1.36.0", false)
	c := f.coordinator()
	forged := f.request(m, nil)
	forged.Desired.Machine.Spec.Version = "v1.37.0"
	g.Expect(call(c, forged).Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	resp := callUntil(t, c, f.request(m, nil), "pick up plan", 3)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(f.getNode("n").Spec.Unschedulable).To(BeTrue())
	g.Expect(f.planSecret("n").Data).To(HaveKey(inplacev1.PlanSecretDataKey))
}

// replaceNS puts the test's namespace where a want message says NS.
func replaceNS(s, ns string) string {
	s = strings.ReplaceAll(s, "NS/", ns+"/")
	return strings.ReplaceAll(s, "namespace NS ", "namespace "+ns+" ")
}

// TestBrokenNodeStaysCordoned: after RollbackFailed or JournalCorrupt the node is in
// an unknown state. It stays cordoned, the Machine says Degraded with the cause, and
// every call answers Failure; one Event, not one per call.
func TestBrokenNodeStaysCordoned(t *testing.T) {
	for _, reason := range []string{protocol.ReasonRollbackFailed, protocol.ReasonJournalCorrupt} {
		t.Run(reason, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			node := "b-" + map[string]string{protocol.ReasonRollbackFailed: "rf", protocol.ReasonJournalCorrupt: "jc"}[reason]
			f.node(node, "v1.35.0", false)
			f.node(node+"-peer", "v1.35.0", false)
			m := f.machine("m-"+node, node, "v1.36.0", false)
			req := f.request(m, &bootstrapv1.KubeadmConfig{})
			c := f.coordinator()
			callUntil(t, c, req, "pick up plan", 3)
			hash := f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
			g.Expect(hash).NotTo(BeEmpty())

			f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseFailed, Step: 3, Steps: 5,
				Reason: reason, Message: "rollback action restore-files failed: read-only file system"}, false)
			for range 3 {
				resp := call(c, req)
				g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
				g.Expect(resp.Message).To(Equal("node " + node + " is degraded: the agent failed plan " + hash[:12] + " and the node needs manual repair: " +
					reason + ": rollback action restore-files failed: read-only file system; it stays cordoned"))
			}
			n := f.getNode(node)
			g.Expect(n.Spec.Unschedulable).To(BeTrue(), "a broken node is never put back in service")
			g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.CordonedByAnnotation, "capi-inplace"))

			stored := &clusterv1.Machine{}
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
			cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDegraded))
			g.Expect(cond.Message).To(ContainSubstring(reason))
			degraded := 0
			for _, r := range f.rec.reasons() {
				if r == inplacev1.EventNodeDegraded {
					degraded++
				}
				g.Expect(r).NotTo(Equal(inplacev1.EventUpdateSucceeded))
			}
			g.Expect(degraded).To(Equal(1))
		})
	}
}

// TestRolledBackNodeIsUsableAgain: the contrast. A rollback that succeeded puts the
// node back in service and the Machine says RolledBack, before the call answers
// Failure (unlike a success's condition, laterreports.go): Cluster API never sees a
// failure the Machine does not explain.
func TestRolledBackNodeIsUsableAgain(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("rb", "v1.35.0", false)
	f.node("rb-peer", "v1.35.0", false)
	m := f.machine("m-rb", "rb", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	c := f.coordinator()
	callUntil(t, c, req, "pick up plan", 3)
	hash := f.getNode("rb").Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports("rb", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Reason: "GateFailed"}, false)
	resp := &runtimehooksv1.UpdateMachineResponse{}
	c.UpdateMachine(f.ctx, req, resp) // not call: nothing may be left pending
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(f.getNode("rb").Spec.Unschedulable).To(BeFalse())
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	g.Expect(meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition).Reason).To(Equal(inplacev1.ReasonRolledBack))
}

// TestPickupDeadline: a node whose agent never reports anything for its plan is not
// left cordoned forever: after the pick-up deadline the plan is withdrawn, the node
// uncordoned, the Machine and the answer say why, and later calls keep saying it
// without cordoning again, until an operator removes the marker.
func TestPickupDeadline(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("pk", "v1.35.0", false)
	f.node("pk-peer", "v1.35.0", false)
	m := f.machine("m-pk", "pk", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := f.coordinator(func(o *Options) { o.Now = func() time.Time { return now } })

	callUntil(t, c, req, "pick up plan", 3)
	hash := f.getNode("pk").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())

	// CAPI calls every second or so: a phase entered within the update's first half
	// minute is dated by the first call after it (watchdog.go, phaseQuietWindow).
	now = now.Add(30 * time.Second)
	call(c, req)
	now = now.Add(4*time.Minute - 30*time.Second)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("pick up plan"))
	g.Expect(f.getNode("pk").Spec.Unschedulable).To(BeTrue())

	now = now.Add(2 * time.Minute)
	want := "node pk: the agent did not pick up plan " + hash[:12] + " within 5m0s; the plan was withdrawn and the node put back in service (remove annotation " +
		inplacev1.PlanNotPickedUpAnnotation + " from the node to retry)"
	for range 2 {
		resp = call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(Equal(want))
		now = now.Add(time.Minute)
	}
	n := f.getNode("pk")
	g.Expect(n.Spec.Unschedulable).To(BeFalse(), "uncordoned: nothing changed on the node")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation), "plan withdrawn")
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.PlanNotPickedUpAnnotation, hash))
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonPlanNotPickedUp))
	g.Expect(cond.Message).To(Equal(want))
	g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventPlanNotPickedUp))

	// The operator retries: cordoned and published again, with a fresh deadline.
	before := n.DeepCopy()
	delete(n.Annotations, inplacev1.PlanNotPickedUpAnnotation)
	g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())
	resp = callUntil(t, c, req, "pick up plan", 3)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(f.getNode("pk").Spec.Unschedulable).To(BeTrue())
}

// TestUpdateNodeTakesTheSpecFromTheCallerAndTheRestFromTheAPI: the in-process entry
// of the single-node controller updates a node to a spec not stored yet (that
// controller aligns the stored objects afterwards), without CAPI's marks, but the
// Machine's cluster, node and identity still come from the stored Machine.
func TestUpdateNodeTakesTheSpecFromTheCallerAndTheRestFromTheAPI(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("ud", "v1.35.0", false)
	f.node("ud-peer", "v1.35.0", false)
	m := f.machine("m-ud", "ud", "v1.35.0", false)
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	stored.Annotations = nil // the single-node path sets no CAPI marks
	g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())

	req := f.request(m, nil)
	req.Desired.Machine.Spec.Version = "v1.36.0"
	req.Desired.Machine.Spec.ClusterName = "not-this-one"
	c := f.coordinator()
	bootstrap, err := toUnstructured(req.Desired.BootstrapConfig)
	g.Expect(err).NotTo(HaveOccurred())
	infra, err := toUnstructured(req.Desired.InfrastructureMachine)
	g.Expect(err).NotTo(HaveOccurred())
	desired := DesiredNode{Machine: &req.Desired.Machine, BootstrapConfig: bootstrap, InfrastructureMachine: infra}
	var out Outcome
	for range 3 {
		out = c.UpdateNode(f.ctx, desired)
		if strings.Contains(out.Message, "pick up plan") {
			break
		}
	}
	g.Expect(out.Kind).To(Equal(OutcomeInProgress), out.Message)
	g.Expect(out.Message).To(ContainSubstring("pick up plan"))
	g.Expect(f.getNode("ud").Spec.Unschedulable).To(BeTrue())

	// The hook refuses the same request: the stored Machine is neither marked nor at
	// that spec.
	hook := call(c, req)
	g.Expect(hook.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(hook.Message).To(ContainSubstring("not marked for an in-place update"))
}

// TestUpdateNodeRequiresTheNamespaceOptIn: the single-node controller's in-process
// entry honours the namespace opt-in as the hook does (review F16): in a namespace not
// labelled inplace.capi-inplace.dev/enabled=true nothing is cordoned or published.
func TestUpdateNodeRequiresTheNamespaceOptIn(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("un", "v1.35.0", false)
	f.node("un-peer", "v1.35.0", false)
	m := f.machine("m-un", "un", "v1.35.0", false)
	ns := &corev1.Namespace{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKey{Name: f.ns}, ns)).To(Succeed())
	delete(ns.Labels, inplacev1.NamespaceEnabledLabel)
	g.Expect(f.mgmt.Update(f.ctx, ns)).To(Succeed())

	req := f.request(m, nil)
	req.Desired.Machine.Spec.Version = "v1.36.0"
	bootstrap, err := toUnstructured(req.Desired.BootstrapConfig)
	g.Expect(err).NotTo(HaveOccurred())
	infra, err := toUnstructured(req.Desired.InfrastructureMachine)
	g.Expect(err).NotTo(HaveOccurred())
	c := f.coordinator()
	for range 2 {
		out := c.UpdateNode(f.ctx, DesiredNode{Machine: &req.Desired.Machine, BootstrapConfig: bootstrap, InfrastructureMachine: infra})
		g.Expect(out.Kind).To(Equal(OutcomeFailedRetryable), out.Message)
		g.Expect(out.Cause).To(Equal(CauseRequestRejected))
		g.Expect(out.Message).To(ContainSubstring("has not opted in to in-place updates"))
	}
	n := f.getNode("un")
	g.Expect(n.Spec.Unschedulable).To(BeFalse(), "not cordoned")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation), "no plan published")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.StagePlanAnnotation), "nothing asked to stage")
}
