package singlenode

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

// patchKCPSpec changes the KCP's spec as another user (an operator, the topology
// controller) with a merge patch.
func (f *fixture) patchKCPSpec(ctx context.Context, g Gomega, patch string) {
	kcp := f.getKCP(ctx, g)
	g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
}

// TestIntegrationPlannerRefusalIsVisibleAndTouchesNothing: a new API server SAN is a
// change the planner refuses (the certificate would keep the old SANs). On the old
// code the controller never asked the planner and called the node update anyway.
func TestIntegrationPlannerRefusalIsVisibleAndTouchesNothing(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, done("node runs the plan"))
	rvBefore := f.versions(ctx, g)

	f.patchKCPSpec(ctx, g, `{"spec":{"kubeadmConfigSpec":{"clusterConfiguration":{"apiServer":{"certSANs":["new.example.com"]}}}}}`)
	g.Eventually(func(g Gomega) {
		for _, conds := range [][]metav1.Condition{f.getKCP(ctx, g).Status.Conditions, f.getCluster(ctx, g).Status.Conditions} {
			cond := meta.FindStatusCondition(conds, inplacev1.InPlaceUpdateCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRefused))
			g.Expect(cond.Message).To(ContainSubstring("clusterConfiguration.apiServer.certSANs"))
		}
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		events := &corev1.EventList{}
		g.Expect(env.admin.List(ctx, events, client.InNamespace(f.ns))).To(Succeed())
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ContainElement(inplacev1.EventUpdateRefused))
	}, 10*time.Second, 200*time.Millisecond).Should(Succeed())

	g.Consistently(func(g Gomega) {
		g.Expect(env.updater.calls(f.machine)).To(BeEmpty(), "the node update must not start")
		g.Expect(held(f.getKCP(ctx, g))).To(BeTrue(), "the hold stays: released, KCP would replace the Machine")
		g.Expect(f.machineCount(ctx, g)).To(Equal(1))
	}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.versions(ctx, g)).To(Equal(rvBefore), "nothing aligned")
}

// TestIntegrationClusterConfigurationReachesKubeadmConfigMap: an apiServer.extraArgs
// change reaches the workload cluster's kubeadm-config ConfigMap before the node
// update starts, as KCP writes it. On the old code nothing wrote the ConfigMap while
// KCP was held, so kubeadm upgrade rendered the old arguments.
func TestIntegrationClusterConfigurationReachesKubeadmConfigMap(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, inProgress(1, "step 3/5: waiting for the agent"), done("node runs the plan"))

	f.patchKCPSpec(ctx, g, `{"spec":{"version":"`+toVersion+`","kubeadmConfigSpec":{"clusterConfiguration":{"apiServer":{"extraArgs":[{"name":"audit-log-maxage","value":"30"}]},"controllerManager":{"extraArgs":[{"name":"node-monitor-grace-period","value":"50s"}]}}}}}`)
	g.Eventually(func(g Gomega) {
		g.Expect(env.updater.calls(f.machine)).NotTo(BeEmpty())
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	cm := &corev1.ConfigMap{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"}, cm)).To(Succeed())
	cc, data, err := kubeadmtypes.UnmarshalClusterConfiguration(cm.Data["ClusterConfiguration"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cc.APIServer.ExtraArgs).To(ContainElement(HaveField("Name", "audit-log-maxage")))
	for _, a := range cc.APIServer.ExtraArgs {
		if a.Name == "audit-log-maxage" {
			g.Expect(a.Value).To(HaveValue(Equal("30")))
		}
	}
	g.Expect(cc.ControllerManager.ExtraArgs).To(ContainElement(HaveField("Name", "node-monitor-grace-period")))
	g.Expect(data.KubernetesVersion).To(HaveValue(Equal(toVersion)))
	g.Expect(cm.Data["ClusterConfiguration"]).To(ContainSubstring("controlPlaneEndpoint: 10.0.0.1:6443"), "fields KCP does not manage are kept")

	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

// addJoinedMachine adds a second control-plane Machine as KCP creates one when it
// scales up (join KubeadmConfig, InfraMachine from the template, Machine at the KCP's
// version, with a node) and sets spec.replicas to 2.
func (f *fixture) addJoinedMachine(ctx context.Context, g Gomega, name string) {
	c := env.admin
	kcp := f.getKCP(ctx, g)
	kc, err := desiredstate.ComputeDesiredKubeadmConfig(kcp, f.cluster, true, name, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	createAsKCP(ctx, g, kc)
	infra, err := desiredstate.ComputeDesiredInfraMachine(ctx, c, kcp, f.cluster, name, nil)
	g.Expect(err).NotTo(HaveOccurred())
	createAsKCP(ctx, g, infra)
	m, err := desiredstate.ComputeDesiredMachine(kcp, f.cluster, "", nil)
	g.Expect(err).NotTo(HaveOccurred())
	m.Name = name
	m.Spec.Version = fromVersion
	m.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: "TestMachine", Name: name}
	m.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	createAsKCP(ctx, g, m)
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(m), m)).To(Succeed())
	m.Status.NodeRef = clusterv1.MachineNodeReference{Name: "node-" + name}
	g.Expect(c.Status().Update(ctx, m)).To(Succeed())
	g.Expect(c.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`)))).To(Succeed())
}

// TestIntegrationTwoReplicasOneNodeAtATime: a control plane of two replicas (KCP
// refuses maxSurge 0 below three) is updated in place one node at a time: the second
// node's update starts only after the first one's is done and aligned, so one node
// always serves; no Machine is created and KCP is released with both up to date.
func TestIntegrationTwoReplicasOneNodeAtATime(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	second := f.ns + "-cp-1"
	f.addJoinedMachine(ctx, g, second)
	f.expectAllUpToDate(ctx, g, 2)

	var firstAlignedBeforeSecond bool
	env.updater.script(f.machine, inProgress(1, "first: waiting for the agent"), done("first node runs the plan"))
	env.updater.script(second, inProgress(1, "second: waiting for the agent"), done("second node runs the plan"))
	env.updater.onFirstCall(second, func() {
		m := &clusterv1.Machine{}
		if err := env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m); err == nil {
			firstAlignedBeforeSecond = m.Spec.Version == toVersion
		}
	})

	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue())
	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(kcp.Annotations).NotTo(HaveKey(clusterv1.PausedAnnotation))
	}, 40*time.Second, 200*time.Millisecond).Should(Succeed())

	order := env.updater.order(f.machine, second)
	g.Expect(order).NotTo(BeEmpty())
	last0, first1 := -1, len(order)
	for i, name := range order {
		if name == f.machine {
			last0 = i
		} else if i < first1 {
			first1 = i
		}
	}
	g.Expect(last0).To(BeNumerically("<", first1), "the second node's update started while the first one's was not done: %v", order)
	g.Expect(firstAlignedBeforeSecond).To(BeTrue(), "the first Machine was not aligned before the second node's update started")
	g.Expect(f.machineCount(ctx, g)).To(Equal(2))
	for _, name := range []string{f.machine, second} {
		m := &clusterv1.Machine{}
		g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, m)).To(Succeed())
		g.Expect(m.Spec.Version).To(Equal(toVersion), name)
	}
	f.expectAllUpToDate(ctx, g, 2)
}

// expectAllUpToDate runs KCP's own comparison on every control-plane Machine.
func (f *fixture) expectAllUpToDate(ctx context.Context, g Gomega, machines int) {
	obs, err := observe(ctx, env.admin, f.getKCP(ctx, g), f.getCluster(ctx, g), time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(obs.machines).To(HaveLen(machines))
	for _, m := range obs.machines {
		g.Expect(obs.upToDate[m.Name]).To(BeTrue(), "Machine %s not up to date for KCP: %v", m.Name, obs.results[m.Name].LogMessages)
	}
}

// TestIntegrationOptInAddedAfterCreation: a Cluster created without the opt-in and
// annotated later (kubectl annotate: a merge patch by another user) is held and
// updated in place like one annotated at creation.
func TestIntegrationOptInAddedAfterCreation(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, false)
	env.updater.script(f.machine, done("node runs the plan"))
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name}}
	g.Expect(env.topology.Patch(ctx, cluster, client.RawPatch("application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+inplacev1.SingleNodeControlPlaneAnnotation+`":"true"}}}`)))).To(Succeed())

	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue(), "the version change after a late opt-in must be held")
	g.Eventually(func(g Gomega) {
		kcp := f.getKCP(ctx, g)
		g.Expect(kcp.Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
		g.Expect(f.versions(ctx, g)).NotTo(BeEmpty())
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	m := &clusterv1.Machine{}
	g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
	g.Expect(m.Spec.Version).To(Equal(toVersion))
	g.Expect(f.getCluster(ctx, g).Annotations).To(HaveKeyWithValue(inplacev1.SingleNodeControlPlaneAnnotation, "true"))
}

// testExtensionConfig is the ExtensionConfig whose settings the suite's controller reads.
const testExtensionConfig = "capi-inplace-test"

// TestIntegrationDisableInPlaceUpdatesIsHonoured: with disableInPlaceUpdates=true in
// the ExtensionConfig's settings (what Cluster API passes to the hooks, whose planner
// then covers nothing), the single-node path refuses too: nothing is touched, the
// refusal names the setting, KCP stays held (no surge). On the old code the setting
// was ignored and the node updated.
func TestIntegrationDisableInPlaceUpdatesIsHonoured(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	ec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "runtime.cluster.x-k8s.io/v1beta2", "kind": "ExtensionConfig",
		"metadata": map[string]any{"name": testExtensionConfig},
		"spec": map[string]any{
			"clientConfig": map[string]any{"url": "https://127.0.0.1:1"},
			"settings":     map[string]any{inplacev1.SettingDisableInPlaceUpdates: "true"},
		},
	}}
	g.Expect(env.admin.Create(ctx, ec)).To(Succeed())
	t.Cleanup(func() { _ = env.admin.Delete(context.Background(), ec) })

	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, done("node runs the plan"))
	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue())
	g.Eventually(func(g Gomega) {
		cond := meta.FindStatusCondition(f.getKCP(ctx, g).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRefused))
		g.Expect(cond.Message).To(ContainSubstring(inplacev1.SettingDisableInPlaceUpdates + "=true"))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(env.updater.calls(f.machine)).To(BeEmpty())
	g.Expect(held(f.getKCP(ctx, g))).To(BeTrue())
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}

// TestIntegrationOptInOnTheKCP: the opt-in on the KubeadmControlPlane itself, arriving
// in the same write as the version change (as the topology controller applies
// spec.topology.controlPlane.metadata.annotations), holds the KCP although the Cluster
// carries no opt-in, and the update runs. On the old code only the Cluster counted.
func TestIntegrationOptInOnTheKCP(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, false)
	env.updater.script(f.machine, done("node runs the plan"))
	kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cp"}}
	patch := `{"metadata":{"annotations":{"` + inplacev1.SingleNodeControlPlaneAnnotation + `":"true"}},"spec":{"version":"` + toVersion + `"}}`
	g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
	g.Expect(held(kcp)).To(BeTrue(), "annotations: %v", kcp.Annotations)
	g.Eventually(func(g Gomega) {
		m := &clusterv1.Machine{}
		g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
		g.Expect(m.Spec.Version).To(Equal(toVersion))
		g.Expect(f.getKCP(ctx, g).Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
}

// TestIntegrationUnmappedOSImageIsRefusedVisibly: when the coordinator refuses an OS
// image change the policy does not map (typed cause CauseOSImageUnmapped, nothing
// touched), the KCP and the Cluster say InPlaceUpdate=False InPlaceUpdateRefused with
// the reason, and the KCP stays held. (Before, the cause had no mapping and read as a
// generic failure; before that, the coordinator planned "no OS change".)
func TestIntegrationUnmappedOSImageIsRefusedVisibly(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	const why = "TestMachine m1 changes its OS image from os-a to os-b, which cannot be applied in place: image os-b is not mapped"
	env.updater.script(f.machine, failedFinal(coordinator.CauseOSImageUnmapped, why+"; nothing was touched"))

	written := f.setVersion(ctx, g, toVersion)
	g.Expect(held(written)).To(BeTrue())
	for what, get := range map[string]func(Gomega) []metav1.Condition{
		"KCP":     func(g Gomega) []metav1.Condition { return f.getKCP(ctx, g).Status.Conditions },
		"Cluster": func(g Gomega) []metav1.Condition { return f.getCluster(ctx, g).Status.Conditions },
	} {
		g.Eventually(func(g Gomega) {
			cond := meta.FindStatusCondition(get(g), inplacev1.InPlaceUpdateCondition)
			g.Expect(cond).NotTo(BeNil(), what)
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse), what)
			g.Expect(cond.Reason).To(Equal(inplacev1.ReasonRefused), what)
			g.Expect(cond.Message).To(ContainSubstring(why), what)
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	}
	g.Expect(held(f.getKCP(ctx, g))).To(BeTrue(), "KCP stays held: released, it would replace the Machine")
	ok, _ := f.upToDate(ctx, g)
	g.Expect(ok).To(BeFalse(), "nothing aligned")
}
