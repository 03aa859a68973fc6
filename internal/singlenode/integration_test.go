package singlenode

import (
	"context"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

const (
	infraGroup  = "infrastructure.inplace-test.dev"
	fromVersion = "v1.35.0"
	toVersion   = "v1.36.0"
	// kubeletLocalMode is the feature gate KCP v1.14.2 adds to the KubeadmConfig for
	// 1.31 <= version < 1.36 and drops from 1.36 (desiredstate.DefaultFeatureGates):
	// a version-derived change that alignment must reproduce exactly.
	kubeletLocalMode = "ControlPlaneKubeletLocalMode"
)

// fixture is one Cluster with a one-replica KCP and its Machine, KubeadmConfig and
// TestMachine, built with KCP's own desired-state functions as KCP would have created them.
type fixture struct {
	ns      string
	machine string
	cluster *clusterv1.Cluster
	kcp     *controlplanev1.KubeadmControlPlane
}

func newFixture(ctx context.Context, t *testing.T, optIn bool) *fixture {
	return newFixtureWith(ctx, t, optIn, createAsKCP)
}

func newFixtureWith(ctx context.Context, t *testing.T, optIn bool, createKubeadmConfig func(context.Context, Gomega, runtime.Object)) *fixture {
	t.Helper()
	g := NewWithT(t)
	c := env.admin
	f := &fixture{ns: "sn-" + rand.String(6)}
	f.machine = f.ns + "-cp-0"
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns,
		Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}})).To(Succeed())

	tmpl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": infraGroup + "/v1alpha1", "kind": "TestMachineTemplate",
		"metadata": map[string]any{"name": "cp-v1", "namespace": f.ns},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"image": "img-1"}}},
	}}
	g.Expect(c.Create(ctx, tmpl)).To(Succeed())

	f.cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: f.ns},
		Spec: clusterv1.ClusterSpec{
			ControlPlaneRef: clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: "cp"},
		},
	}
	if optIn {
		f.cluster.Annotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
	}
	g.Expect(c.Create(ctx, f.cluster)).To(Succeed())

	nodeReg := bootstrapv1.NodeRegistrationOptions{Name: "{{ ds.meta_data.local_hostname }}"}
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: f.ns, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To[int32](1),
			Version:  fromVersion,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{
				Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: "TestMachineTemplate", Name: "cp-v1"},
				},
			},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeReg},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeReg},
				Files:             []bootstrapv1.File{{Path: "/etc/motd", Content: "one"}},
			},
		},
	}
	g.Expect(c.Create(ctx, kcp)).To(Succeed())
	f.kcp = kcp

	// As KCP creates its first Machine: init KubeadmConfig, InfraMachine cloned from
	// the template, Machine at the KCP's version.
	kc, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, f.cluster, false, f.machine, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kc.Spec.ClusterConfiguration.FeatureGates).To(HaveKeyWithValue(kubeletLocalMode, true))
	kc.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	createKubeadmConfig(ctx, g, kc)
	infra, err := desiredstate.ComputeDesiredInfraMachine(ctx, c, kcp, f.cluster, f.machine, nil)
	g.Expect(err).NotTo(HaveOccurred())
	createAsKCP(ctx, g, infra)
	m, err := desiredstate.ComputeDesiredMachine(kcp, f.cluster, "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	m.Name = f.machine
	m.Spec.Version = fromVersion
	m.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: "TestMachine", Name: f.machine}
	m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: f.machine}
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	createAsKCP(ctx, g, m)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-" + f.machine}
	g.Expect(c.Status().Update(ctx, m)).To(Succeed())

	// The fixture must be what KCP itself calls up to date, or nothing below means anything.
	ok, why := f.upToDate(ctx, g)
	g.Expect(ok).To(BeTrue(), "fixture not up to date for KCP: %v", why)
	return f
}

// createAsKCP creates an object the way KCP does (createInfraMachine,
// createKubeadmConfig, createMachine): a server-side apply under its field manager, so
// KCP owns the spec fields and a later apply can remove them.
func createAsKCP(ctx context.Context, g Gomega, obj runtime.Object) {
	u, err := toApplyIntent(obj)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(KCPFieldManager), client.ForceOwnership)).To(Succeed())
}

func (f *fixture) getKCP(ctx context.Context, g Gomega) *controlplanev1.KubeadmControlPlane {
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "cp"}, kcp)).To(Succeed())
	return kcp
}

func (f *fixture) getCluster(ctx context.Context, g Gomega) *clusterv1.Cluster {
	cluster := &clusterv1.Cluster{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "c1"}, cluster)).To(Succeed())
	return cluster
}

// upToDate runs KCP's own comparison (through observe) on the fixture's Machine.
func (f *fixture) upToDate(ctx context.Context, g Gomega) (bool, []string) {
	kcp := f.getKCP(ctx, g)
	obs, err := observe(ctx, env.admin, kcp, f.getCluster(ctx, g), time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(obs.machines).To(HaveLen(1))
	return obs.upToDate[f.machine], obs.results[f.machine].LogMessages
}

// versions is the resourceVersion of each of the Machine's three objects.
func (f *fixture) versions(ctx context.Context, g Gomega) []string {
	m := &clusterv1.Machine{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
	kc := &bootstrapv1.KubeadmConfig{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, kc)).To(Succeed())
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion(infraGroup + "/v1alpha1")
	infra.SetKind("TestMachine")
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, infra)).To(Succeed())
	return []string{m.ResourceVersion, kc.ResourceVersion, infra.GetResourceVersion()}
}

// alignedVersions is what aligning the fixture's Machine changes: the Machine's
// generation (its spec; a failure record is only an annotation) and the
// resourceVersions of its KubeadmConfig and TestMachine.
func (f *fixture) alignedVersions(ctx context.Context, g Gomega) []string {
	v := f.versions(ctx, g)
	return []string{fmt.Sprint(f.getMachine(ctx, g).Generation), v[1], v[2]}
}

func (f *fixture) getMachine(ctx context.Context, g Gomega) *clusterv1.Machine {
	m := &clusterv1.Machine{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
	return m
}

// expectFailedOnTheMachine checks that the failure of the KCP's current target is
// recorded on the Machine, with reason, and nowhere on the KCP.
func (f *fixture) expectFailedOnTheMachine(ctx context.Context, g Gomega, reason string) {
	kcp := f.getKCP(ctx, g)
	g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldFailedAnnotation), "the KCP carries no failure record")
	rec, ok := MachineFailedUpdate(f.getMachine(ctx, g))
	g.Expect(ok).To(BeTrue(), "the Machine records the failure")
	g.Expect(rec).To(Equal(FailedUpdate{Target: TargetHash(kcp), Reason: reason}))
}

// expectNoFailureRecord checks that neither the KCP nor the Machine records a failure.
func (f *fixture) expectNoFailureRecord(ctx context.Context, g Gomega) {
	g.Expect(f.getKCP(ctx, g).Annotations).NotTo(HaveKey(inplacev1.HoldFailedAnnotation))
	g.Expect(f.getMachine(ctx, g).Annotations).NotTo(HaveKey(inplacev1.FailedUpdateAnnotation))
}

// setVersion changes the KCP's version as another user (the topology controller or an
// operator) and returns the object as the API server stored it in that same write.
func (f *fixture) setVersion(ctx context.Context, g Gomega, version string) *controlplanev1.KubeadmControlPlane {
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cp"}}
	patch := []byte(fmt.Sprintf(`{"spec":{"version":%q}}`, version))
	g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	return kcp
}

func (f *fixture) machineCount(ctx context.Context, g Gomega) int {
	list := &clusterv1.MachineList{}
	g.Expect(env.admin.List(ctx, list, client.InNamespace(f.ns))).To(Succeed())
	return len(list.Items)
}

func held(kcp *controlplanev1.KubeadmControlPlane) bool {
	_, paused := kcp.Annotations[clusterv1.PausedAnnotation]
	return paused && IsHeld(kcp)
}

func TestIntegrationHoldUpdateAlignRelease(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	before := &clusterv1.Machine{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, before)).To(Succeed())
	env.updater.script(f.machine,
		inProgress(1, "step 3/5: waiting for the agent"),
		inProgress(1, "step 4/5: verifying"),
		done("node runs the plan"))

	// The very write that changes the version carries the pause: KCP can never observe
	// the new version unpaused.
	written := f.setVersion(ctx, g, toVersion)
	g.Expect(held(written)).To(BeTrue(), "annotations: %v", written.Annotations)
	g.Expect(written.Annotations[inplacev1.HoldAnnotation]).To(Equal(TargetHash(written)))

	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		cond := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonSucceeded))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// Aligned exactly as KCP would have: its own comparison now says up to date.
	ok, why := f.upToDate(ctx, g)
	g.Expect(ok).To(BeTrue(), "not up to date after alignment: %v", why)
	after := &clusterv1.Machine{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, after)).To(Succeed())
	g.Expect(after.UID).To(Equal(before.UID))
	g.Expect(after.Spec.Version).To(Equal(toVersion))
	kc := &bootstrapv1.KubeadmConfig{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, kc)).To(Succeed())
	g.Expect(kc.Spec.ClusterConfiguration.FeatureGates).NotTo(HaveKey(kubeletLocalMode))
	g.Expect(kc.Spec.InitConfiguration.IsDefined()).To(BeFalse(), "desired KubeadmConfig is the join form")
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))

	cond := meta.FindStatusCondition(f.getCluster(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))

	// The coordinator saw the desired objects as the Machine controller would send them.
	calls := env.updater.calls(f.machine)
	g.Expect(len(calls)).To(BeNumerically(">=", 3))
	last := calls[len(calls)-1]
	g.Expect(last.Machine.Spec.Version).To(Equal(toVersion))
	g.Expect(last.Machine.UID).To(BeEmpty(), "hook requests carry no server metadata")
	var boot bootstrapv1.KubeadmConfig
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(last.BootstrapConfig.Object, &boot)).To(Succeed())
	g.Expect(boot.Spec.JoinConfiguration.ControlPlane).NotTo(BeNil())
	g.Expect(boot.Spec.ClusterConfiguration.FeatureGates).NotTo(HaveKey(kubeletLocalMode))
	g.Expect(boot.Spec.Files).To(ContainElement(bootstrapv1.File{Path: "/etc/motd", Content: "one"}))
	g.Expect(last.InfrastructureMachine.GetKind()).To(Equal("TestMachine"))
	t.Logf("updated %s in place to %s after %d UpdateMachine calls; KCP released; UID %s kept", f.machine, toVersion, len(calls), after.UID)

	// Aligning again (a restart right after the writes) changes nothing.
	rv := f.versions(ctx, g)
	obs, err := observe(ctx, env.admin, f.getKCP(ctx, g), f.getCluster(ctx, g), time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := desiredFrom(obs.results[f.machine])
	g.Expect(err).NotTo(HaveOccurred())
	_, err = applier{c: env.admin}.apply(ctx, objs, false)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.versions(ctx, g)).To(Equal(rv))
}

// createPlain creates an object with a plain create: its fields are owned by a manager
// that is not KCP's, as on objects created by old CAPI versions or adopted.
func createPlain(ctx context.Context, g Gomega, obj runtime.Object) {
	o, ok := obj.(client.Object)
	g.Expect(ok).To(BeTrue())
	g.Expect(env.admin.Create(ctx, o)).To(Succeed())
}

func TestIntegrationUnalignableObjectsNeverTouchTheNode(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	// KCP's field manager does not own the KubeadmConfig's feature gate, so the
	// alignment apply could not remove it and the Machine would stay outdated.
	f := newFixtureWith(ctx, t, true, createPlain)
	rvBefore := f.alignedVersions(ctx, g)

	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue())
	g.Eventually(func(g Gomega) {
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonFailed)
		cond := meta.FindStatusCondition(f.getKCP(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonFailed))
		g.Expect(cond.Message).To(ContainSubstring("node was not touched"))
		g.Expect(cond.Message).To(ContainSubstring(kubeletLocalMode))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.updater.calls(f.machine)).To(BeEmpty(), "the node update must not start")
	g.Expect(held(f.getKCP(ctx, g))).To(BeTrue())
	g.Expect(f.alignedVersions(ctx, g)).To(Equal(rvBefore))

	// A retry is one attempt: it fails the same way before the node is touched, and
	// recording that failure takes the retry annotation, which no coordinator call
	// takes here. On the old code the retry ran again and again.
	f.annotateMachine(ctx, g, inplacev1.RetryAnnotation, ptr.To("true"))
	g.Eventually(func(g Gomega) {
		g.Expect(f.getMachine(ctx, g).Annotations).NotTo(HaveKey(inplacev1.RetryAnnotation))
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonFailed)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	rv := f.getMachine(ctx, g).ResourceVersion
	g.Consistently(func(g Gomega) {
		g.Expect(f.getMachine(ctx, g).ResourceVersion).To(Equal(rv), "the Machine is not written again")
		cond := meta.FindStatusCondition(f.getKCP(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonFailed))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.updater.calls(f.machine)).To(BeEmpty(), "the node update must not start")
	g.Expect(f.alignedVersions(ctx, g)).To(Equal(rvBefore))
}

// failFirstAttempt moves the KCP to toVersion with a node update that is rolled
// back, then succeeds if asked again, and waits for the Machine's failure record.
func (f *fixture) failFirstAttempt(ctx context.Context, g *WithT) {
	env.updater.script(f.machine,
		failedFinal(coordinator.CauseRolledBack, "node n: the agent rolled back plan abc: GateFailed: kubelet not Ready"),
		done("node n runs plan def"))
	f.setVersion(ctx, g, toVersion)
	g.Eventually(func(g Gomega) {
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// legacyFailure moves the KCP to toVersion as the version before the Machine's
// failure record left a failed update: the KCP's InPlaceUpdate condition says
// reason, and the same write that changes the version (and brings the hold) carries
// hold-failed with failedTarget (the new target when empty), so the controller
// never sees the hold without it.
func (f *fixture) legacyFailure(ctx context.Context, g Gomega, reason, failedTarget string) {
	kcp := f.getKCP(ctx, g)
	kcp.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: reason, Message: "recorded by the version before", LastTransitionTime: metav1.Now()}}
	g.Expect(env.topology.Status().Update(ctx, kcp)).To(Succeed())
	next := kcp.DeepCopy()
	next.Spec.Version = toVersion
	if failedTarget == "" {
		failedTarget = TargetHash(next)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"version":%q}}`, inplacev1.HoldFailedAnnotation, failedTarget, toVersion))
	g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	g.Expect(held(kcp)).To(BeTrue())
	g.Expect(kcp.Annotations[inplacev1.HoldAnnotation]).To(Equal(TargetHash(next)), "the test's target is the hold's")
}

// TestIntegrationLegacyHoldFailedMovesToTheMachine: a KCP whose update failed
// before the upgrade to the Machine's failure record carries hold-failed. It is
// still a failure of that target: moved onto the Machine once, with the reason the
// KCP's condition gives, removed from the KCP, and then treated as any failure.
func TestIntegrationLegacyHoldFailedMovesToTheMachine(t *testing.T) {
	env.require(t)
	ctx := context.Background()

	t.Run("rolled back: not retried until the Machine asks", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, true)
		env.updater.script(f.machine, done("node n runs plan def"))
		f.legacyFailure(ctx, g, inplacev1.ReasonRolledBack, "")
		g.Eventually(func(g Gomega) {
			f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Consistently(func(g Gomega) {
			g.Expect(held(f.getKCP(ctx, g))).To(BeTrue())
			g.Expect(env.updater.calls(f.machine)).To(BeEmpty(), "a failed target is not retried unasked")
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())

		f.annotateMachine(ctx, g, inplacev1.RetryAnnotation, ptr.To("true"))
		f.expectReleasedUpToDate(ctx, g)
		g.Expect(env.updater.calls(f.machine)).To(HaveLen(1))
	})

	t.Run("past a deadline: still asked about, the late commit wins", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, true)
		env.updater.script(f.machine,
			failedFinal(coordinator.CauseDeadlineExceeded, "node n: passed the Verifying deadline"),
			done("node n runs plan abc"))
		f.legacyFailure(ctx, g, inplacev1.ReasonDeadlineExceeded, "")
		f.expectReleasedUpToDate(ctx, g)
		g.Expect(env.updater.calls(f.machine)).To(HaveLen(2))
	})

	t.Run("of an older target: removed, the new target is updated", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, true)
		env.updater.script(f.machine, done("node n runs plan abc"))
		f.legacyFailure(ctx, g, inplacev1.ReasonRolledBack, "an-older-target")
		f.expectReleasedUpToDate(ctx, g)
		g.Expect(env.updater.calls(f.machine)).To(HaveLen(1))
	})
}

// TestIntegrationRetryByMachineAnnotation: the retry procedure of the hook path,
// the Machine's retry annotation alone, retries a failed single-node update too:
// the controller forgets the failed target, keeping the hold, and updates the
// Machine again.
func TestIntegrationRetryByMachineAnnotation(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	f.failFirstAttempt(ctx, g)
	g.Consistently(func() int { return len(env.updater.calls(f.machine)) }, 2*time.Second, 200*time.Millisecond).Should(Equal(1), "a failed target is not retried unasked")

	m := &clusterv1.Machine{}
	g.Expect(env.topology.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, inplacev1.RetryAnnotation))
	g.Expect(env.topology.Patch(ctx, m, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())

	f.expectReleasedUpToDate(ctx, g)
	g.Expect(env.updater.calls(f.machine)).To(HaveLen(2))
}

func TestIntegrationOptOutHandsBackToKCP(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, failedFinal(coordinator.CauseRolledBack, "node n: the agent rolled back plan abc: GateFailed"))
	// The operator had paused the KCP before: releasing must keep that pause.
	kcp := f.getKCP(ctx, g)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:""}}}`, clusterv1.PausedAnnotation))
	g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())

	g.Expect(f.setVersion(ctx, g, toVersion).Annotations).To(HaveKeyWithValue(inplacev1.HoldOperatorPausedAnnotation, "true"))
	g.Eventually(func(g Gomega) {
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// Opting out is removing the opt-in from both the Cluster and the KCP (the
	// controller copied the Cluster's onto the KCP). While held, the KCP's is the last
	// one, and removing it would make KCP replace the Machine: refused, with how to
	// cancel first, unless the write also sets allow-replace (review F15).
	cluster := f.getCluster(ctx, g)
	patch = []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, inplacev1.SingleNodeControlPlaneAnnotation))
	g.Expect(env.topology.Patch(ctx, cluster, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	err := env.topology.Patch(ctx, f.getKCP(ctx, g), client.RawPatch("application/merge-patch+json", patch))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "removing a held KCP's last opt-in is refused: %v", err)
	g.Expect(err.Error()).To(And(ContainSubstring("revert the spec"), ContainSubstring(inplacev1.AllowReplaceAnnotation)))
	g.Consistently(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).To(HaveKeyWithValue(inplacev1.SingleNodeControlPlaneAnnotation, "true"))
		g.Expect(kcp.Annotations).To(HaveKey(inplacev1.HoldAnnotation), "still held")
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))

	patch = []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null,%q:"INC-1"}}}`, inplacev1.SingleNodeControlPlaneAnnotation, inplacev1.AllowReplaceAnnotation))
	g.Expect(env.topology.Patch(ctx, f.getKCP(ctx, g), client.RawPatch("application/merge-patch+json", patch))).To(Succeed())

	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldOperatorPausedAnnotation))
		g.Expect(kcp.Annotations).To(HaveKey(clusterv1.PausedAnnotation), "the operator's own pause stays")
		cond := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonReleased))
		f.expectNoFailureRecord(ctx, g)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestIntegrationHeldOptInStaysOnTheKCP: while held, the Cluster's opt-in is kept
// copied on the KCP, even where the copy had been removed before, so removing the
// Cluster's (a write the hold webhook never sees) does not release a failed hold and
// let KCP replace the Machine (review F15).
func TestIntegrationHeldOptInStaysOnTheKCP(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, failedFinal(coordinator.CauseRolledBack, "node n: the agent rolled back plan abc: GateFailed"))
	g.Eventually(func(g Gomega) {
		g.Expect(f.getKCP(ctx, g).Annotations).To(HaveKeyWithValue(inplacev1.SingleNodeOptInCopiedAnnotation, "true"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, inplacev1.SingleNodeControlPlaneAnnotation))
	g.Expect(env.topology.Patch(ctx, f.getKCP(ctx, g), client.RawPatch("application/merge-patch+json", patch))).To(Succeed())

	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue(), "the Cluster's opt-in counts")
	g.Eventually(func(g Gomega) {
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
		a := f.getKCP(ctx, g).Annotations
		g.Expect(a).To(HaveKeyWithValue(inplacev1.SingleNodeControlPlaneAnnotation, "true"), "copied again while held")
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	g.Expect(env.topology.Patch(ctx, f.getCluster(ctx, g), client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
	g.Consistently(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(held(kcp)).To(BeTrue(), "the failed hold stays")
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
	}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
}

// TestIntegrationNamespaceNotEnabledIsUntouched: in a namespace not labelled
// inplace.capi-inplace.dev/enabled=true nothing here acts, whatever the Cluster and
// the KCP say (review F16): a version change is not held (the webhook is registered
// here without the manifests' namespaceSelector, as a direct caller would reach it),
// and a hold, pause and opt-in a tenant wrote themselves update no node, release
// nothing and write no condition.
func TestIntegrationNamespaceNotEnabledIsUntouched(t *testing.T) {
	env.require(t)
	ctx := context.Background()
	disable := func(g Gomega, f *fixture) {
		ns := &corev1.Namespace{}
		g.Expect(env.admin.Get(ctx, client.ObjectKey{Name: f.ns}, ns)).To(Succeed())
		delete(ns.Labels, inplacev1.NamespaceEnabledLabel)
		g.Expect(env.admin.Update(ctx, ns)).To(Succeed())
	}

	t.Run("no hold starts", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, true)
		disable(g, f)
		written := f.setVersion(ctx, g, toVersion)
		g.Expect(written.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(written.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
	})

	t.Run("a self-made hold moves nothing", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, false)
		env.updater.script(f.machine, done("node runs the plan"))
		disable(g, f)
		patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true",%q:"",%q:"self-made"}}}`,
			inplacev1.SingleNodeControlPlaneAnnotation, clusterv1.PausedAnnotation, inplacev1.HoldAnnotation))
		g.Expect(env.topology.Patch(ctx, f.getKCP(ctx, g), client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
		f.setVersion(ctx, g, toVersion)
		g.Consistently(func(g Gomega) {
			kcp := f.getKCP(ctx, g)
			g.Expect(held(kcp)).To(BeTrue(), "not released either")
			g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldUpdatingAnnotation))
			g.Expect(meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)).To(BeNil())
		}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Expect(env.updater.calls(f.machine)).To(BeEmpty())
		ok, _ := f.upToDate(ctx, g)
		g.Expect(ok).To(BeFalse(), "nothing aligned")
	})
}

func TestIntegrationNotOptedInIsUntouched(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, false)

	written := f.setVersion(ctx, g, toVersion)
	g.Expect(written.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
	g.Expect(written.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
	g.Consistently(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)).To(BeNil())
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.updater.calls(f.machine)).To(BeEmpty())
}

func TestIntegrationHoldSurvivesServerSideApplyAndEdits(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	// No script: the node update stays in progress, so the hold stays.

	apply := func(annotations map[string]any) *unstructured.Unstructured {
		meta := map[string]any{"name": "cp", "namespace": f.ns}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": controlplanev1.GroupVersion.String(), "kind": "KubeadmControlPlane",
			"metadata": meta,
			"spec":     map[string]any{"version": toVersion},
		}}
		g.Expect(env.topology.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("capi-topology"), client.ForceOwnership)).To(Succeed())
		return u
	}
	annotationsOf := func(u *unstructured.Unstructured) map[string]string { return u.GetAnnotations() }

	// 1. The topology controller's apply changes the version: held in the same write.
	got := apply(nil)
	g.Expect(annotationsOf(got)).To(HaveKey(clusterv1.PausedAnnotation))
	g.Expect(annotationsOf(got)).To(HaveKey(inplacev1.HoldAnnotation))
	target := annotationsOf(got)[inplacev1.HoldAnnotation]

	// 2. Its next apply, which does not list the annotations.
	got = apply(nil)
	g.Expect(annotationsOf(got)).To(HaveKey(clusterv1.PausedAnnotation))
	g.Expect(annotationsOf(got)).To(HaveKeyWithValue(inplacev1.HoldAnnotation, target))

	// 3. Worst case: the applier owns both annotations (it listed them once), then
	// drops them, so server-side apply removes them; the webhook puts them back.
	got = apply(map[string]any{clusterv1.PausedAnnotation: "", inplacev1.HoldAnnotation: target})
	g.Expect(annotationsOf(got)).To(HaveKeyWithValue(inplacev1.HoldAnnotation, target))
	got = apply(nil)
	g.Expect(annotationsOf(got)).To(HaveKey(clusterv1.PausedAnnotation))
	g.Expect(annotationsOf(got)).To(HaveKeyWithValue(inplacev1.HoldAnnotation, target))

	// 4. Someone else removes the pause by hand: it comes back.
	kcp := f.getKCP(ctx, g)
	delete(kcp.Annotations, clusterv1.PausedAnnotation)
	delete(kcp.Annotations, inplacev1.HoldAnnotation)
	g.Expect(env.topology.Update(ctx, kcp)).To(Succeed())
	g.Expect(held(kcp)).To(BeTrue(), "annotations after an edit removing them: %v", kcp.Annotations)

	// 5. Someone else forges the controller's release: the hold stays and the marker
	// is not stored.
	kcp = f.getKCP(ctx, g)
	kcp.Annotations[inplacev1.HoldReleaseAnnotation] = kcp.Annotations[inplacev1.HoldAnnotation]
	delete(kcp.Annotations, clusterv1.PausedAnnotation)
	delete(kcp.Annotations, inplacev1.HoldAnnotation)
	g.Expect(env.topology.Update(ctx, kcp)).To(Succeed())
	g.Expect(held(kcp)).To(BeTrue(), "annotations after a forged release: %v", kcp.Annotations)
	g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldReleaseAnnotation))

	// Meanwhile the node update is in flight, reported on the KCP, and no Machine was created.
	g.Eventually(func(g Gomega) {
		cond := meta.FindStatusCondition(f.getKCP(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonInProgress))
		g.Expect(f.getKCP(ctx, g).Annotations).To(HaveKeyWithValue(inplacev1.HoldUpdatingAnnotation, f.machine))
	}, 20*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}

func TestIntegrationFailureAlignsNothingAndKeepsHold(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	const cause = "GateFailed: etcd member unhealthy after kubeadm upgrade"
	env.updater.script(f.machine,
		inProgress(1, "step 3/5: waiting for the agent"),
		failedFinal(coordinator.CauseRolledBack, "node node-x: the agent rolled back plan 1a2b3c: "+cause))
	rvBefore := f.alignedVersions(ctx, g)

	written := f.setVersion(ctx, g, toVersion)
	g.Expect(held(written)).To(BeTrue())

	g.Eventually(func(g Gomega) {
		// The one failure record is the Machine's; on the old code it was the KCP's.
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
		kcp := f.getKCP(ctx, g)
		cond := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRolledBack))
		g.Expect(cond.Message).To(ContainSubstring(cause))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	kcp := f.getKCP(ctx, g)
	g.Expect(held(kcp)).To(BeTrue(), "KCP stays paused: releasing it would create a surge Machine")
	g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldUpdatingAnnotation))
	// The Cluster's condition is written after the KCP's, in a later step.
	g.Eventually(func(g Gomega) {
		cond := meta.FindStatusCondition(f.getCluster(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRolledBack))
		g.Expect(cond.Message).To(ContainSubstring(cause))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// Nothing aligned: not one write to the Machine's spec, its KubeadmConfig or TestMachine.
	g.Expect(f.alignedVersions(ctx, g)).To(Equal(rvBefore))
	ok, _ := f.upToDate(ctx, g)
	g.Expect(ok).To(BeFalse())

	// The failed target is not retried.
	calls := len(env.updater.calls(f.machine))
	g.Consistently(func() int { return len(env.updater.calls(f.machine)) }, 3*time.Second, 200*time.Millisecond).Should(Equal(calls))

	events := &corev1.EventList{}
	g.Expect(env.admin.List(ctx, events, client.InNamespace(f.ns))).To(Succeed())
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason+": "+e.Message)
	}
	g.Eventually(func(g Gomega) {
		list := &corev1.EventList{}
		g.Expect(env.admin.List(ctx, list, client.InNamespace(f.ns))).To(Succeed())
		found := false
		for _, e := range list.Items {
			if e.Reason == inplacev1.EventUpdateRolledBack && strings.Contains(e.Message, cause) {
				found = true
			}
		}
		g.Expect(found).To(BeTrue(), "events: %v", reasons)
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())

	// The operator reverts the version: every Machine is up to date again, the hold goes.
	f.setVersion(ctx, g, fromVersion)
	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		f.expectNoFailureRecord(ctx, g)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.alignedVersions(ctx, g)).To(Equal(rvBefore))
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}

// TestIntegrationLateCommitAfterDeadlineWins: a single control plane's update
// that passed a deadline is recorded as failed (the Machine's record, the KCP paused, not
// aligned), then asked about again, quietly, as Cluster API keeps calling on the
// hook path: when the agent commits after all, the Machine is aligned and the
// hold released, done without a retry. A verdict other than the deadline's, once
// it comes, is a failure for good.
func TestIntegrationLateCommitAfterDeadlineWins(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	const late = "node n: passed the Verifying deadline of 10m0s; last seen: the agent runs its gates"
	env.updater.script(f.machine,
		failedFinal(coordinator.CauseDeadlineExceeded, late),
		failedFinal(coordinator.CauseDeadlineExceeded, late),
		failedFinal(coordinator.CauseDeadlineExceeded, late),
		done("node n runs plan abc"))
	rvBefore := f.alignedVersions(ctx, g)
	f.setVersion(ctx, g, toVersion)

	g.Eventually(func(g Gomega) {
		f.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonDeadlineExceeded)
		kcp := f.getKCP(ctx, g)
		cond := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDeadlineExceeded))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Expect(f.alignedVersions(ctx, g)).To(Equal(rvBefore), "nothing aligned while failed")

	f.expectReleasedUpToDate(ctx, g)
	g.Expect(env.updater.calls(f.machine)).To(HaveLen(4))
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
	list := &corev1.EventList{}
	g.Expect(env.admin.List(ctx, list, client.InNamespace(f.ns))).To(Succeed())
	deadlineEvents := 0
	for _, e := range list.Items {
		if e.Reason == inplacev1.EventDeadlineExceeded && e.InvolvedObject.Kind == "KubeadmControlPlane" {
			deadlineEvents++
		}
	}
	g.Expect(deadlineEvents).To(Equal(1), "the same failure asked about again is not recorded again")

	// Another target passes its deadline, then the agent rolls back: failed for good.
	g2 := newFixture(ctx, t, true)
	env.updater.script(g2.machine,
		failedFinal(coordinator.CauseDeadlineExceeded, late),
		failedFinal(coordinator.CauseRolledBack, "node n: the agent rolled back plan abc: GateFailed"),
		done("never asked"))
	g2.setVersion(ctx, g, toVersion)
	g.Eventually(func(g Gomega) {
		cond := meta.FindStatusCondition(g2.getKCP(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRolledBack))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	g.Consistently(func() int { return len(env.updater.calls(g2.machine)) }, 2*time.Second, 100*time.Millisecond).Should(Equal(2))
	g.Expect(held(g2.getKCP(ctx, g))).To(BeTrue())
	g2.expectFailedOnTheMachine(ctx, g, inplacev1.ReasonRolledBack)
}

// annotateMachine sets (value non-nil) or removes (nil) one annotation of the
// fixture's Machine, as an operator does.
func (f *fixture) annotateMachine(ctx context.Context, g Gomega, key string, value *string) {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.machine}}
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v))
	g.Expect(env.topology.Patch(ctx, m, client.RawPatch("application/merge-patch+json", patch))).To(Succeed())
}

// expectCancelled waits for the cancelled state: held and paused, the condition
// says cancelled, and nothing records a failure or an update in flight.
func (f *fixture) expectCancelled(ctx context.Context, g *WithT) {
	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(held(kcp)).To(BeTrue(), "releasing would make KCP replace the only control plane")
		f.expectNoFailureRecord(ctx, g) // a cancel is not a failure
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldUpdatingAnnotation))
		cond := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonCancelled))
		g.Expect(cond.Message).To(ContainSubstring("cancelled by annotation " + inplacev1.CancelAnnotation))
		g.Expect(cond.Message).To(ContainSubstring("remove the annotation from Machine " + f.machine + " to update it"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// expectReleasedUpToDate waits for the hold's release with the Machine up to date.
func (f *fixture) expectReleasedUpToDate(ctx context.Context, g *WithT) {
	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(kcp.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
		f.expectNoFailureRecord(ctx, g)
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	ok, why := f.upToDate(ctx, g)
	g.Expect(ok).To(BeTrue(), "%v", why)
}

// TestIntegrationCancelBeforeStart: the Machine's cancel annotation, the hook
// path's cancel, keeps a single-node update from starting: no node update call,
// the KCP stays held and paused, cancelled rather than failed. Reverting the spec
// releases the hold as usual; without the annotation the next change updates.
func TestIntegrationCancelBeforeStart(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, done("node runs the plan"))
	f.annotateMachine(ctx, g, inplacev1.CancelAnnotation, ptr.To("true"))
	rvBefore := f.versions(ctx, g)

	f.setVersion(ctx, g, toVersion)
	f.expectCancelled(ctx, g)
	g.Consistently(func() int { return len(env.updater.calls(f.machine)) }, 2*time.Second, 200*time.Millisecond).Should(BeZero(), "a cancelled update does not start")
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))

	// Reverting the spec while cancelled: every Machine is up to date, the hold goes.
	f.setVersion(ctx, g, fromVersion)
	f.expectReleasedUpToDate(ctx, g)
	g.Expect(env.updater.calls(f.machine)).To(BeEmpty())

	// Without the annotation, the next change updates in place.
	f.annotateMachine(ctx, g, inplacev1.CancelAnnotation, nil)
	f.setVersion(ctx, g, toVersion)
	f.expectReleasedUpToDate(ctx, g)
	g.Expect(env.updater.calls(f.machine)).To(HaveLen(1))
	g.Expect(f.versions(ctx, g)[0]).NotTo(Equal(rvBefore[0]), "the Machine was aligned")
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}

// TestIntegrationCancelInFlightThenResume: cancel annotated while the update is in
// flight; the coordinator withdraws it (Failure, cause Cancelled, as it answers
// before the agent's first destructive action). The KCP stays held, not failed;
// removing the annotation alone (the Machine watch wakes the controller) resumes
// the update to the KCP's spec.
func TestIntegrationCancelInFlightThenResume(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.onFirstCall(f.machine, func() { f.annotateMachine(ctx, g, inplacev1.CancelAnnotation, ptr.To("true")) })
	env.updater.script(f.machine,
		inProgress(1, "step 3/6: draining node n"),
		failedFinal(coordinator.CauseCancelled, "node n: update cancelled by annotation "+inplacev1.CancelAnnotation+" before the agent changed anything"),
		done("node n runs the plan"))

	f.setVersion(ctx, g, toVersion)
	f.expectCancelled(ctx, g)
	g.Consistently(func() int { return len(env.updater.calls(f.machine)) }, 2*time.Second, 200*time.Millisecond).Should(Equal(2), "no call while cancelled")
	g.Eventually(func(g Gomega) {
		cond := meta.FindStatusCondition(f.getCluster(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonCancelled))
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		list := &corev1.EventList{}
		g.Expect(env.admin.List(ctx, list, client.InNamespace(f.ns))).To(Succeed())
		var cancelled int
		for _, e := range list.Items {
			if e.Reason == inplacev1.EventUpdateCancelled && e.InvolvedObject.Kind == "KubeadmControlPlane" {
				cancelled++
			}
			g.Expect(e.Reason).NotTo(Equal(inplacev1.EventUpdateFailed))
		}
		g.Expect(cancelled).To(Equal(1))
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())

	f.annotateMachine(ctx, g, inplacev1.CancelAnnotation, nil)
	f.expectReleasedUpToDate(ctx, g)
	g.Expect(env.updater.calls(f.machine)).To(HaveLen(3))
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}
