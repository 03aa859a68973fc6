package coordinator

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestWorkerUpdateEndToEnd drives one worker update through every step against the
// real API server: cordon, a drain blocked by a PDB (and reported), eviction, plan
// published exactly once, a coordinator restart, the (simulated) agent's progress,
// the outside version gate, uncordon, and idempotent calls after completion.
func TestWorkerUpdateEndToEnd(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w1", "v1.35.0", false)
	f.node("w1-peer", "v1.35.0", false)
	m := f.machine("m-w1", "w1", "v1.36.0", false)
	g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "tls"},
		Data:       map[string][]byte{"tls.crt": []byte("CERTIFICATE")},
	})).To(Succeed())
	cfg := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		Files: []bootstrapv1.File{
			{Path: "/etc/motd", Content: "updated in place", Permissions: "0644"},
			{Path: "/etc/pki/tls.crt", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "tls", Key: "tls.crt"}}},
		},
	}}
	req := f.request(m, cfg)

	app := map[string]string{"app": "web"}
	f.pod("web-1", "w1", app, controllerRef("ReplicaSet", "web", "11111111-1111-1111-1111-111111111111"), nil)
	ds := f.daemonSet("logs")
	f.pod("logs-w1", "w1", nil, controllerRef("DaemonSet", ds.Name, string(ds.UID)), nil)
	f.pod("static-w1", "w1", nil, controllerRef("ReplicaSet", "x", "22222222-2222-2222-2222-222222222222"), map[string]string{corev1.MirrorPodAnnotationKey: "mirror"})
	f.blockingPDB("web-pdb", app)

	c := f.coordinator(func(o *Options) { o.ManageAgents = true; o.AgentImage = "registry.example/capi-inplace:test" })

	// Call 1: agent installed, node cordoned, eviction refused by the PDB.
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(2)))
	g.Expect(resp.Message).To(Equal("step 3/6: draining node w1: pod " + f.ns + "/web-1: eviction blocked by PodDisruptionBudget " + f.ns + "/web-pdb (The disruption budget web-pdb is still being processed by the server.)"))
	n := f.getNode("w1")
	g.Expect(n.Spec.Unschedulable).To(BeTrue())
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.CordonedByAnnotation, "capi-inplace"))
	g.Expect(n.Annotations).To(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation), "no plan before the node is drained")
	g.Expect(f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: agentinstall.AgentName}, &corev1.ServiceAccount{})).To(Succeed())
	g.Expect(f.rec.reasons()).To(Equal([]string{inplacev1.EventDrainStarted, inplacev1.EventDrainBlocked}))
	g.Expect(f.rec.events[0]).To(HavePrefix("*v1beta2.Machine " + f.ns + "/m-w1 Normal"))
	// The Machine says why its node is cordoned, for status and fleet status.
	cond := f.machineCondition(m)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDrainBlocked))
	g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(cond.Message).To(Equal(resp.Message))

	// Still blocked on the next call: same message (deterministic), still cordoned,
	// and neither the condition nor a second Event written for the same blocker.
	g.Expect(call(c, req).Message).To(Equal(resp.Message))
	g.Expect(f.podExists("web-1")).To(BeTrue())
	g.Expect(f.machineCondition(m).LastTransitionTime).To(Equal(cond.LastTransitionTime))
	g.Expect(f.rec.reasons()).To(Equal([]string{inplacev1.EventDrainStarted, inplacev1.EventDrainBlocked}))

	// The operator relaxes the budget: the pod is evicted, DaemonSet and mirror pods stay.
	g.Expect(f.wl.Delete(f.ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web-pdb"}})).To(Succeed())
	resp = callUntil(t, c, req, "pick up plan", 5)
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(1)))
	g.Expect(f.podExists("web-1")).To(BeFalse())
	g.Expect(f.podExists("logs-w1")).To(BeTrue())
	g.Expect(f.podExists("static-w1")).To(BeTrue())
	g.Expect(f.machineCondition(m).Reason).To(Equal(inplacev1.ReasonInProgress), "the drain no longer holds the Machine")

	// The plan: Secret + desired-plan annotation, hash of the plan's content.
	sec := f.planSecret("w1")
	g.Expect(sec.Labels).To(HaveKeyWithValue(inplacev1.PlanNodeLabel, "w1"))
	plan, err := openPlan(sec.Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	hash, _ := plan.Hash()
	g.Expect(f.getNode("w1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
	g.Expect(resp.Message).To(Equal("step 5/6: waiting for the agent on node w1 to pick up plan " + hash[:12]))
	g.Expect(plan.Kubernetes).To(Equal(protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}))
	g.Expect(plan.Files).To(ContainElement(protocol.File{Path: "/etc/pki/tls.crt", Content: []byte("CERTIFICATE")}))
	g.Expect(plan.Machine.UID).To(Equal(string(m.UID)))

	// Published once: repeated calls write nothing.
	rv := sec.ResourceVersion
	nodeRV := f.getNode("w1").ResourceVersion
	for range 3 {
		g.Expect(call(c, req).Message).To(Equal(resp.Message))
	}
	g.Expect(f.planSecret("w1").ResourceVersion).To(Equal(rv))
	g.Expect(f.getNode("w1").ResourceVersion).To(Equal(nodeRV))

	// A fresh coordinator (restart) sees the same state and says the same.
	c = f.coordinator(func(o *Options) { o.ManageAgents = true; o.AgentImage = "registry.example/capi-inplace:test" })
	g.Expect(call(c, req).Message).To(Equal(resp.Message))
	g.Expect(f.planSecret("w1").ResourceVersion).To(Equal(rv))

	// The agent works on it.
	f.agentReports("w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 2, Steps: 4, Action: "kubeadm-upgrade-node"}, false)
	resp = call(c, req)
	g.Expect(resp.Message).To(Equal("step 5/6: waiting for the agent on node w1 to apply plan " + hash[:12] + ": Applying (2/4 kubeadm-upgrade-node)"))

	// Committed, but the kubelet does not report the new version yet: not done.
	f.agentReports("w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 4, Steps: 4}, true)
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(1)))
	g.Expect(resp.Message).To(Equal(`step 6/6: waiting for node w1 to report kubelet v1.36.0 (reports "v1.35.0")`))
	g.Expect(f.getNode("w1").Spec.Unschedulable).To(BeTrue())

	// The kubelet reports it: the plan hash must not move (the node's version is an
	// input of the kubeadm action, pinned to the published plan), and we are done.
	f.setKubelet("w1", "v1.36.0")
	resp = call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(resp.Message).To(Equal("node w1 runs plan " + hash[:12]))
	n = f.getNode("w1")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(f.planSecret("w1").ResourceVersion).To(Equal(rv))

	// CAPI may call again after completion: same answer, no writes, no new events.
	events := len(f.rec.reasons())
	nodeRV = n.ResourceVersion
	resp = call(c, req)
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(f.getNode("w1").ResourceVersion).To(Equal(nodeRV))
	g.Expect(f.rec.reasons()).To(HaveLen(events))
	g.Expect(f.rec.reasons()).To(ContainElements(inplacev1.EventPlanPublished, inplacev1.EventUpdateSucceeded))
	published := 0
	for _, r := range f.rec.reasons() {
		if r == inplacev1.EventPlanPublished {
			published++
		}
	}
	g.Expect(published).To(Equal(1))
}

// TestControlPlaneRollback: the first control-plane node gets `kubeadm upgrade apply`
// and an etcd snapshot; the agent rolls back; the node is uncordoned, the Machine
// gets a Warning event once, and every call answers Failure with the cause.
func TestControlPlaneRollback(t *testing.T) {
	g := NewWithT(t)
	// Which node runs `kubeadm upgrade apply` depends on every control-plane Node of
	// the workload cluster: this one must not see other tests' nodes.
	f := newFixture(t, dedicatedWorkload(t))
	f.node("cp1", "v1.35.0", true)
	f.node("cp1-peer", "v1.35.0", true)
	m := f.machine("m-cp1", "cp1", "v1.36.0", true)
	req := f.request(m, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{
		ClusterConfiguration: bootstrapv1.ClusterConfiguration{ControlPlaneEndpoint: "10.0.0.1:6443"},
	}})
	c := f.coordinator()

	callUntil(t, c, req, "pick up plan", 3)
	plan, err := openPlan(f.planSecret("cp1").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Kubernetes.Action).To(Equal(protocol.KubeadmUpgradeApply))
	g.Expect(plan.Kubernetes.EtcdSnapshot).To(BeTrue())
	g.Expect(string(plan.ClusterConfiguration)).To(ContainSubstring("10.0.0.1:6443"))
	hash, _ := plan.Hash()
	g.Expect(f.getNode("cp1").Spec.Unschedulable).To(BeTrue())

	f.agentReports("cp1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Step: 3, Steps: 6,
		Reason: "GateFailed", Message: "static pod kube-apiserver did not run v1.36.0 within 5m0s"}, false)
	want := "node cp1: the agent rolled back plan " + hash[:12] + ": GateFailed: static pod kube-apiserver did not run v1.36.0 within 5m0s"
	for range 2 {
		resp := call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(Equal(want))
	}
	n := f.getNode("cp1")
	g.Expect(n.Spec.Unschedulable).To(BeFalse(), "uncordoned after rollback")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
	rolledBack := 0
	for _, e := range f.rec.events {
		if strings.Contains(e, inplacev1.EventUpdateRolledBack) {
			rolledBack++
			g.Expect(e).To(ContainSubstring("m-cp1 Warning"))
			g.Expect(e).To(ContainSubstring("GateFailed"))
		}
	}
	g.Expect(rolledBack).To(Equal(1), "one event, not one per retry")

	// Withdrawing the plan alone changes nothing: the failure is still reported.
	n = f.getNode("cp1")
	before := n.DeepCopy()
	delete(n.Annotations, inplacev1.DesiredPlanAnnotation)
	g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())
	g.Expect(call(c, req).Message).To(Equal(want))
	g.Expect(f.getNode("cp1").Spec.Unschedulable).To(BeFalse())

	// The operator asks for another try of the same plan: plan withdrawn and the
	// agent's verdict cleared.
	n = f.getNode("cp1")
	before = n.DeepCopy()
	delete(n.Annotations, inplacev1.StatusAnnotation)
	delete(n.Annotations, inplacev1.StateAnnotation)
	g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())
	resp := callUntil(t, c, req, "pick up plan", 3)
	g.Expect(resp.Message).To(Equal("step 5/6: waiting for the agent on node cp1 to pick up plan " + hash[:12]))
	n = f.getNode("cp1")
	g.Expect(n.Spec.Unschedulable).To(BeTrue(), "cordoned again for the retry")
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
}

// TestOperatorCordonIsKept: a node cordoned by someone else stays cordoned.
func TestOperatorCordonIsKept(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w2", "v1.36.0", false)
	n := f.getNode("w2")
	n.Spec.Unschedulable = true
	g.Expect(f.wl.Update(f.ctx, n)).To(Succeed())
	m := f.machine("m-w2", "w2", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/x", Content: "y"}}}})
	c := f.coordinator()

	callUntil(t, c, req, "pick up plan", 3)
	g.Expect(f.getNode("w2").Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
	plan, err := openPlan(f.planSecret("w2").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Kubernetes.Action).To(Equal(protocol.KubeadmNone), "version unchanged")
	hash, _ := plan.Hash()
	f.agentReports("w2", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)
	resp := call(c, req)
	g.Expect(resp.RetryAfterSeconds).To(BeZero())
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	n = f.getNode("w2")
	g.Expect(n.Spec.Unschedulable).To(BeTrue(), "the operator's cordon stays")
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
}

// TestSingleNodeClusterSkipsEviction uses a second API server as a workload cluster
// with one node: its pods stay (nowhere to go), the plan is published right away.
func TestSingleNodeClusterSkipsEviction(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, dedicatedWorkload(t))
	f.node("solo", "v1.35.0", true)
	f.pod("db-0", "solo", map[string]string{"app": "db"}, controllerRef("StatefulSet", "db", "33333333-3333-3333-3333-333333333333"), nil)
	f.blockingPDB("db", map[string]string{"app": "db"})
	m := f.machine("m-solo", "solo", "v1.36.0", true)
	c := f.coordinator()

	resp := call(c, f.request(m, nil))
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("step 5/6: waiting for the agent on node solo to pick up plan"))
	g.Expect(f.podExists("db-0")).To(BeTrue())
	g.Expect(f.getNode("solo").Spec.Unschedulable).To(BeTrue())
}

// TestSkipEvictionPolicy: by policy, the node is cordoned but nothing is evicted.
func TestSkipEvictionPolicy(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w3", "v1.36.0", false)
	f.node("w3-peer", "v1.36.0", false)
	f.pod("keep", "w3", map[string]string{"app": "keep"}, controllerRef("ReplicaSet", "keep", "44444444-4444-4444-4444-444444444444"), nil)
	m := f.machine("m-w3", "w3", "v1.36.0", false)
	c := f.coordinator(func(o *Options) { o.Drain.SkipEviction = true })
	resp := call(c, f.request(m, nil))
	g.Expect(resp.Message).To(ContainSubstring("pick up plan"))
	g.Expect(f.podExists("keep")).To(BeTrue())
}

// TestDrainTimeout: a drain blocked longer than the timeout answers Failure, names
// the blocker, and keeps the node cordoned.
func TestDrainTimeout(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w4", "v1.36.0", false)
	f.node("w4-peer", "v1.36.0", false)
	f.pod("api-1", "w4", map[string]string{"app": "api"}, controllerRef("ReplicaSet", "api", "55555555-5555-5555-5555-555555555555"), nil)
	f.blockingPDB("api", map[string]string{"app": "api"})
	m := f.machine("m-w4", "w4", "v1.36.0", false)
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	c := f.coordinator(func(o *Options) { o.Now = func() time.Time { return now }; o.Drain.Timeout = time.Minute })
	req := f.request(m, nil)
	g.Expect(call(c, req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	now = now.Add(2 * time.Minute)
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(HavePrefix("step 3/6: draining node w4 did not finish within 1m0s: pod " + f.ns + "/api-1: eviction blocked by PodDisruptionBudget " + f.ns + "/api"))
	g.Expect(f.getNode("w4").Spec.Unschedulable).To(BeTrue())
}

// TestNotReadyYetAndErrors covers the answers before any work can start.
func TestNotReadyYetAndErrors(t *testing.T) {
	f := newFixture(t, nil)
	noRef := f.machine("m-noref", "", "v1.36.0", false)
	ghost := f.machine("m-ghost", "ghost-node", "v1.36.0", false)
	f.node("w5", "v1.36.0", false)
	far := f.machine("m-far", "w5", "v1.36.0", false)
	secretless := f.machine("m-secretless", "w5", "v1.36.0", false)
	unreachable, err := NewWorkloadCluster(&rest.Config{Host: "https://127.0.0.1:1"}, f.scheme, time.Second)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		c       *Coordinator
		req     *runtimehooksv1.UpdateMachineRequest
		status  runtimehooksv1.ResponseStatus
		retry   int32
		message string
	}{
		{"machine without nodeRef", f.coordinator(), f.request(noRef, nil), runtimehooksv1.ResponseStatusSuccess, 10,
			"step 1/6: waiting for Machine " + f.ns + "/m-noref to report its node (status.nodeRef)"},
		{"node missing", f.coordinator(), f.request(ghost, nil), runtimehooksv1.ResponseStatusFailure, 0,
			"node ghost-node of Machine " + f.ns + "/m-ghost does not exist in cluster c1"},
		{"workload cluster unreachable", f.coordinator(func(o *Options) { o.Clusters = StaticClusters{Cluster: unreachable} }), f.request(far, nil),
			runtimehooksv1.ResponseStatusSuccess, 10, "waiting for the API server of cluster c1: read node w5:"},
		{"missing file secret", f.coordinator(), f.request(secretless, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
			{Path: "/etc/k", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "nope", Key: "k"}}}}}}),
			runtimehooksv1.ResponseStatusFailure, 0, "build plan for node w5: cannot build node plan: file /etc/k: secret nope not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			resp := call(tt.c, tt.req)
			g.Expect(resp.Status).To(Equal(tt.status), resp.Message)
			g.Expect(resp.RetryAfterSeconds).To(Equal(tt.retry))
			g.Expect(resp.Message).To(HavePrefix(tt.message))
		})
	}
	g := NewWithT(t)
	g.Expect(f.getNode("w5").Spec.Unschedulable).To(BeFalse(), "no failure path touched the node")
}

func TestNewValidatesOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"empty", Options{}, "management Client is required"},
		{"agent without image", Options{ManageAgents: true}, "AgentImage is required"},
		{"negative timeout", Options{Drain: DrainOptions{Timeout: -1}}, "must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := New(tt.opts)
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}
}

// TestPlanRepublishedWhenDeleted: a plan Secret deleted while the coordinator waits is
// written again (same hash); nothing else changes.
func TestPlanRepublishedWhenDeleted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w8", "v1.36.0", false)
	f.node("w8-peer", "v1.36.0", false)
	m := f.machine("m-w8", "w8", "v1.36.0", false)
	req := f.request(m, nil)
	c := f.coordinator()
	want := callUntil(t, c, req, "pick up plan", 3).Message
	sec := f.planSecret("w8")
	g.Expect(f.wl.Delete(f.ctx, sec)).To(Succeed())
	g.Expect(call(c, req).Message).To(Equal(want))
	again := f.planSecret("w8")
	g.Expect(again.UID).NotTo(Equal(sec.UID))
	// Sealed afresh (a new one-time key), so compare what the node opens.
	before, err := openPlan(sec.Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	after, err := openPlan(again.Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).To(Equal(before))
}

// TestLingerAnswersDoneWithinTheCall: a call made while the agent works keeps checking
// for up to Linger and answers done as soon as the agent committed and the kubelet
// reports the version, instead of "call back in 1 s".
func TestLingerAnswersDoneWithinTheCall(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("w9", "v1.35.0", false)
	m := f.machine("m-w9", "w9", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})

	scripted := f.coordinator()
	resp := callUntil(t, scripted, req, "pick up plan", 5)
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(1)))
	hash := f.getNode("w9").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())

	// Without the agent, a lingering call gives up after Linger with the same answer.
	lingering := f.coordinator(func(o *Options) { o.Linger = 600 * time.Millisecond })
	start := time.Now()
	resp = call(lingering, req)
	g.Expect(time.Since(start)).To(BeNumerically(">=", 500*time.Millisecond))
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(1)))
	g.Expect(resp.Message).To(ContainSubstring("pick up plan"))

	// The agent commits and the kubelet reports v1.36.0 400 ms into the call.
	agentDone := make(chan error, 1)
	go func() {
		time.Sleep(400 * time.Millisecond)
		v, err := protocol.EncodeStatus(protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1})
		if err != nil {
			agentDone <- err
			return
		}
		n := &corev1.Node{}
		if err := f.wl.Get(f.ctx, client.ObjectKey{Name: "w9"}, n); err != nil {
			agentDone <- err
			return
		}
		before := n.DeepCopy()
		n.Annotations[inplacev1.StatusAnnotation] = v
		n.Annotations[inplacev1.CurrentPlanAnnotation] = hash
		if err := f.wl.Patch(f.ctx, n, client.MergeFrom(before)); err != nil {
			agentDone <- err
			return
		}
		before = n.DeepCopy()
		n.Status.NodeInfo.KubeletVersion = "v1.36.0"
		agentDone <- f.wl.Status().Patch(f.ctx, n, client.MergeFrom(before))
	}()
	lingering = f.coordinator(func(o *Options) { o.Linger = 5 * time.Second })
	start = time.Now()
	resp = call(lingering, req)
	elapsed := time.Since(start)
	g.Expect(<-agentDone).To(Succeed())
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
	g.Expect(resp.Message).To(Equal("node w9 runs plan " + hash[:12]))
	g.Expect(elapsed).To(BeNumerically("<", 3*time.Second), "answered once the node was done, not at the end of Linger")
	g.Expect(f.getNode("w9").Spec.Unschedulable).To(BeFalse())
}

// TestMachineConditionSurvivesAConflict: the Machine changed since the call read it
// (another controller wrote it); the condition is still written, on the Machine as
// stored now, keeping the other write.
func TestMachineConditionSurvivesAConflict(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	m := f.machine("m-cond-conflict", "", "v1.36.0", false)
	stale := m.DeepCopy()
	f.annotate(m, "example.com/other-writer", "1")
	c := f.coordinator()
	changed, err := c.setMachineCondition(f.ctx, stale, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionTrue, Reason: inplacev1.ReasonSucceeded, Message: "done"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	g.Expect(stored.Annotations).To(HaveKeyWithValue("example.com/other-writer", "1"))
	cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonSucceeded))
}

// TestMachineConditionIsRedacted: a condition quotes agent status and errors; a
// secret value in it (a crypt(3) hash) is redacted before it is stored, whichever
// step wrote it.
func TestMachineConditionIsRedacted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	m := f.machine("m-cond-redact", "", "v1.36.0", false)
	const hash = "$6$saltsalt$0123456789abcdefABCDEF./"
	c := f.coordinator()
	_, err := c.setMachineCondition(f.ctx, m, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: inplacev1.ReasonFailed, Message: "users step failed: chpasswd refused " + hash})
	g.Expect(err).NotTo(HaveOccurred())
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Message).NotTo(ContainSubstring(hash))
	g.Expect(cond.Message).To(ContainSubstring(protocol.Redacted))
}
