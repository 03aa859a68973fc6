package coordinator

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestDecideDoneOnlyForTheCommittedDesiredState: a Committed status is done only
// when it is about the desired state the Machine's spec asks for and no other
// plan is published; the node's current-plan annotation is never taken as done.
func TestDecideDoneOnlyForTheCommittedDesiredState(t *testing.T) {
	const (
		hashA, hashB, hashC = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccccccccccccccc"
		want, other         = "11111111111111111111111111111111", "22222222222222222222222222222222"
	)
	base := Observation{Node: "n1", PlanHash: hashA, DesiredState: want, TargetVersion: "v1.36.0", KubeletVersion: "v1.36.0", Ready: true, Started: true}
	with := func(mut func(*Observation)) Observation {
		o := base
		mut(&o)
		return o
	}
	status := func(hash, desired string, phase protocol.Phase) *protocol.NodeStatus {
		return &protocol.NodeStatus{V: protocol.StatusVersion, PlanHash: hash, DesiredState: desired, Phase: phase}
	}
	tests := []struct {
		name string
		obs  Observation
		want Action
	}{
		{name: "our plan committed for our desired state", want: ActSucceed,
			obs: with(func(o *Observation) { o.Published, o.Status = hashA, status(hashA, want, protocol.PhaseCommitted) })},
		{name: "another build of our desired state committed (rotated credential, other replica)", want: ActSucceed,
			obs: with(func(o *Observation) { o.Published, o.Status = hashB, status(hashB, want, protocol.PhaseCommitted) })},
		{name: "an agent from before desired states committed our very plan", want: ActSucceed,
			obs: with(func(o *Observation) { o.Published, o.Status = hashA, status(hashA, "", protocol.PhaseCommitted) })},
		{name: "review probe: current-plan is ours, another plan is being applied", want: ActWait,
			obs: with(func(o *Observation) {
				o.CurrentPlan, o.Published, o.Status = hashA, hashB, status(hashB, other, protocol.PhaseApplying)
			})},
		{name: "current-plan is ours, nothing reported", want: ActStart,
			obs: with(func(o *Observation) { o.CurrentPlan = hashA })},
		{name: "committed for another desired state", want: ActStart,
			obs: with(func(o *Observation) { o.Published, o.Status = hashB, status(hashB, other, protocol.PhaseCommitted) })},
		{name: "committed, but its desired state is not ours although its hash is", want: ActReportFailure,
			obs: with(func(o *Observation) { o.Published, o.Status = hashA, status(hashA, other, protocol.PhaseCommitted) })},
		{name: "our plan committed, another plan published since", want: ActStart,
			obs: with(func(o *Observation) { o.Published, o.Status = hashC, status(hashA, want, protocol.PhaseCommitted) })},
		{name: "another build of our desired state committed, a third plan published since", want: ActStart,
			obs: with(func(o *Observation) { o.Published, o.Status = hashC, status(hashB, want, protocol.PhaseCommitted) })},
		{name: "another build of our desired state still applying", want: ActWait,
			obs: with(func(o *Observation) { o.Published, o.Status = hashB, status(hashB, want, protocol.PhaseApplying) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := Decide(tt.obs)
			g.Expect(d.Action).To(Equal(tt.want), d.Message)
		})
	}
}

// TestOneDesiredStateAcrossReplicasAndCredentials: a second replica whose policy
// lists the same gates in another order, called after the registry credential
// rotated, builds a plan of another hash for the same Machine spec, keeps the
// published plan (the plan Secret and the node's desired plan stay as they are)
// and answers done once the agent commits it.
func TestOneDesiredStateAcrossReplicasAndCredentials(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	digest := "sha256:" + fmt.Sprintf("%064x", 7)
	replicaPolicy := func(gates string) *policy.Policy {
		pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %[1]s:
      kubeadm: {url: "oci://registry.example.com:5000/k8s/kubeadm", digest: "%[2]s"}
      kubelet: {url: "oci://registry.example.com:5000/k8s/kubelet", digest: "%[2]s"}
registryCredentials:
- {registry: "registry.example.com:5000", secretRef: {namespace: %[3]s, name: site-registry}}
gates:
- cluster: %[3]s/c1
  gates: %[4]s
`, platform, digest, f.ns, gates))
		g.Expect(err).NotTo(HaveOccurred())
		return pol
	}
	one := replicaPolicy(`[{name: a, command: [/bin/true]}, {name: b, command: [/bin/true]}]`)
	two := replicaPolicy(`[{name: b, command: [/bin/true]}, {name: a, command: [/bin/true]}]`)
	login := func(pass string) string {
		return `{"auths":{"registry.example.com:5000":{"username":"site-a","password":"` + pass + `"}}}`
	}
	g.Expect(f.mgmt.Create(f.ctx, pullSecret(f.ns, "site-registry", login("first-password")))).To(Succeed())
	for _, n := range []string{"ds1", "ds1-peer"} {
		f.node(n, "v1.35.0", false)
		node := f.getNode(n)
		node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
		g.Expect(f.wl.Status().Update(f.ctx, node)).To(Succeed())
	}
	replicaOne := f.coordinator(func(o *Options) { o.Binaries, o.RegistryCredentials, o.Gates = one, one, one })
	replicaTwo := f.coordinator(func(o *Options) { o.Binaries, o.RegistryCredentials, o.Gates = two, two, two })
	req := f.request(f.machine("m-ds1", "ds1", "v1.36.3", false), nil)

	published, sealed, plan := stageAndPublish(t, f, replicaOne, req, "ds1")
	secret := f.planSecret("ds1")
	g.Expect(plan.RegistryCredentials[0].Password).To(Equal("first-password"))

	// The credential rotates; the other replica's policy orders the gates the other way.
	pull := pullSecret(f.ns, "site-registry", login("rotated-password"))
	g.Expect(f.mgmt.Update(f.ctx, withResourceVersion(f, pull))).To(Succeed())
	s, out, ok := replicaTwo.loadScope(f.ctx, desiredFor(t, replicaTwo, req))
	g.Expect(ok).To(BeTrue(), out.Message)
	built, err := s.plan.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(built).NotTo(Equal(published), "the rotated credential and the gate order are in the plan")
	g.Expect(s.desiredState).To(Equal(sealed.DesiredState), "not in its desired state")
	g.Expect(s.planHash).To(Equal(published), "the published plan is kept")

	resp := call(replicaTwo, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	g.Expect(resp.Message).To(ContainSubstring("pick up plan " + short(published)))
	g.Expect(f.getNode("ds1").Annotations[inplacev1.DesiredPlanAnnotation]).To(Equal(published))
	g.Expect(f.planSecret("ds1").ResourceVersion).To(Equal(secret.ResourceVersion), "no new plan")

	f.agentReports("ds1", protocol.NodeStatus{V: protocol.StatusVersion, PlanHash: published, DesiredState: sealed.DesiredState, Phase: protocol.PhaseCommitted}, true)
	f.setKubelet("ds1", "v1.36.3")
	resp = call(replicaTwo, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
}

// stageAndPublish calls c until node's plan is staged (the agent's report
// written by the test) and published, and returns the published hash, the
// sealed plan and the plan it opens to.
func stageAndPublish(t *testing.T, f *fixture, c *Coordinator, req *runtimehooksv1.UpdateMachineRequest, node string) (string, *protocol.SealedPlan, *protocol.NodePlan) {
	t.Helper()
	g := NewWithT(t)
	callUntil(t, c, req, "to stage plan", 3)
	staged := f.getNode(node).Annotations[inplacev1.StagePlanAnnotation]
	v, err := protocol.EncodeStagingStatus(protocol.StagingStatus{PlanHash: staged, Phase: protocol.StagePhaseStaged, Items: 2, Done: 2})
	g.Expect(err).NotTo(HaveOccurred())
	f.annotate(f.getNode(node), inplacev1.StagingStatusAnnotation, v)
	callUntil(t, c, req, "pick up plan", 5)
	hash := f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).To(Equal(staged))
	sealed, err := protocol.DecodeSealedPlan(f.planSecret(node).Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	plan, err := sealed.Open(testAgentKey)
	g.Expect(err).NotTo(HaveOccurred())
	return hash, sealed, plan
}

// desiredFor reads the request's objects as a call does.
func desiredFor(t *testing.T, c *Coordinator, req *runtimehooksv1.UpdateMachineRequest) desiredObjects {
	t.Helper()
	d, out, ok := c.readStored(context.Background(), req)
	if !ok {
		t.Fatalf("read the request's objects: %s", out.Message)
	}
	return d
}

// withResourceVersion sets obj's resourceVersion to the stored one, for an Update.
func withResourceVersion(f *fixture, obj client.Object) client.Object {
	f.t.Helper()
	stored := obj.DeepCopyObject().(client.Object)
	if err := f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		f.t.Fatal(err)
	}
	obj.SetResourceVersion(stored.GetResourceVersion())
	return obj
}

// TestRetryTakesThePolicyFix: an update fails on a wrong kubelet digest in the
// policy; the extension restarts with the digest fixed and the operator retries.
// The retry publishes a plan built from the fixed policy, not the plan it withdrew,
// and that plan keeps the withdrawn plan's kubeadm step although the Node, read
// right after the rollback, still reports the new kubelet (as real nodes do for
// a while). Once published, the new plan is kept: a replica still on the old
// policy does not publish its own build.
func TestRetryTakesThePolicyFix(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	platform := runtime.GOOS + "/" + runtime.GOARCH
	wrong, fixed := "sha256:"+fmt.Sprintf("%064x", 1), "sha256:"+fmt.Sprintf("%064x", 2)
	withKubelet := func(digest string) *policy.Policy {
		pol, err := policy.Parse(fmt.Appendf(nil, `
kubernetesBinaries:
  v1.36.3:
    %s:
      kubeadm: {url: "https://artifacts.example.com/kubeadm", digest: "sha256:%064x"}
      kubelet: {url: "https://artifacts.example.com/kubelet", digest: "%s"}
`, platform, 3, digest))
		g.Expect(err).NotTo(HaveOccurred())
		return pol
	}
	for _, n := range []string{"rf-w1", "rf-peer"} {
		f.node(n, "v1.35.0", false)
		node := f.getNode(n)
		node.Status.NodeInfo.OperatingSystem, node.Status.NodeInfo.Architecture = runtime.GOOS, runtime.GOARCH
		g.Expect(f.wl.Status().Update(f.ctx, node)).To(Succeed())
	}
	m := f.machine("m-rf-w1", "rf-w1", "v1.36.3", false)
	req := f.request(m, nil)
	storedMachine := func() *clusterv1.Machine {
		stored := &clusterv1.Machine{}
		g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
		return stored
	}

	before := f.coordinator(func(o *Options) { o.Binaries = withKubelet(wrong) })
	withdrawn, _, plan := stageAndPublish(t, f, before, req, "rf-w1")
	g.Expect(plan.Kubernetes.Binaries.Kubelet.Digest).To(Equal(wrong))
	g.Expect(plan.Kubernetes.Action).To(Equal(protocol.KubeadmUpgradeNode))
	f.agentReports("rf-w1", protocol.NodeStatus{PlanHash: withdrawn, Phase: protocol.PhaseRolledBack, Steps: 6, Step: 2,
		Reason: "StagingFailed", Message: "kubelet: digest mismatch"}, false)
	f.setKubelet("rf-w1", "v1.36.3")
	g.Expect(call(before, req).Status).To(Equal(runtimehooksv1.ResponseStatusFailure))

	after := f.coordinator(func(o *Options) { o.Binaries = withKubelet(fixed) })
	f.annotate(m, inplacev1.RetryAnnotation, "true")
	resp := call(after, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	g.Expect(storedMachine().Annotations).To(HaveKeyWithValue(inplacev1.RetriedPlanAnnotation, withdrawn))

	retried, _, plan := stageAndPublish(t, f, after, req, "rf-w1")
	g.Expect(retried).NotTo(Equal(withdrawn), "the withdrawn plan was published again")
	g.Expect(plan.Kubernetes.Binaries.Kubelet.Digest).To(Equal(fixed))
	g.Expect(plan.Kubernetes.Action).To(Equal(protocol.KubeadmUpgradeNode), "the kubeadm step was chosen again from the stale Node")
	g.Expect(storedMachine().Annotations).NotTo(HaveKey(inplacev1.RetriedPlanAnnotation))

	s, out, ok := before.loadScope(f.ctx, desiredFor(t, before, req))
	g.Expect(ok).To(BeTrue(), out.Message)
	g.Expect(s.planHash).To(Equal(retried), "a replica on the old policy keeps the published plan")
}
