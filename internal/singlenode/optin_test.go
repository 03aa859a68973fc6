package singlenode

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func TestCopyOptIn(t *testing.T) {
	const (
		optIn  = inplacev1.SingleNodeControlPlaneAnnotation
		copied = inplacev1.SingleNodeOptInCopiedAnnotation
	)
	cluster := func(a map[string]string) *clusterv1.Cluster {
		return &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: a}}
	}
	kcp := func(a map[string]string) *controlplanev1.KubeadmControlPlane {
		return &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: "cp", Annotations: a}}
	}
	both := map[string]string{optIn: "true", copied: "true"}
	for _, tc := range []struct {
		name    string
		cluster *clusterv1.Cluster
		kcp     *controlplanev1.KubeadmControlPlane
		want    map[string]string
	}{
		{"opted-in Cluster, bare KCP: copied with the marker", cluster(map[string]string{optIn: "true"}), kcp(nil), both},
		{"opted-in Cluster, KCP with other annotations", cluster(map[string]string{optIn: "true"}), kcp(map[string]string{"x": "y"}), both},
		{"Cluster not opted in", cluster(nil), kcp(nil), nil},
		{"Cluster opt-in other than true", cluster(map[string]string{optIn: "yes"}), kcp(nil), nil},
		{"no Cluster", nil, kcp(nil), nil},
		{"no KCP", cluster(map[string]string{optIn: "true"}), nil, nil},
		{"KCP already opted in", cluster(map[string]string{optIn: "true"}), kcp(map[string]string{optIn: "true"}), nil},
		{"explicit KCP value false is never overwritten", cluster(map[string]string{optIn: "true"}), kcp(map[string]string{optIn: "false"}), nil},
		{"explicit empty KCP value is never overwritten", cluster(map[string]string{optIn: "true"}), kcp(map[string]string{optIn: ""}), nil},
		{"copied before and removed from the KCP since: not again", cluster(map[string]string{optIn: "true"}), kcp(map[string]string{copied: "true"}), nil},
		{"copied before and removed, but held: copied again (the hold webhook guards it there)", cluster(map[string]string{optIn: "true"}),
			kcp(map[string]string{copied: "true", inplacev1.HoldAnnotation: "t"}), both},
		{"held, explicit KCP value false is never overwritten", cluster(map[string]string{optIn: "true"}),
			kcp(map[string]string{optIn: "false", inplacev1.HoldAnnotation: "t"}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(CopyOptIn(tc.cluster, tc.kcp)).To(Equal(tc.want))
		})
	}
}

// dropClusterAnnotations deletes every annotation of the fixture's Cluster with the
// JSON merge patch Cluster API v1.14.2's hooks.MarkAsDone sends when the hook it marks
// done was the only annotation of its cached copy (docs/single-node.md).
func (f *fixture) dropClusterAnnotations(ctx context.Context, g Gomega) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name}}
	g.Expect(env.topology.Patch(ctx, cluster, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":null}}`)))).To(Succeed())
	g.Expect(f.getCluster(ctx, g).Annotations).To(BeEmpty())
}

// TestIntegrationClusterOptInSurvivesLosingItsAnnotations: the controller copies a
// Cluster's opt-in onto the KCP when it first sees it; when Cluster API later deletes
// the Cluster's annotations (the MarkAsDone merge patch), the next version change is
// still held and updated in place, with no new Machine. On the old code the opt-in was
// read from the Cluster (or an operator's KCP annotation) only: the write was not held
// and KCP would have surged.
func TestIntegrationClusterOptInSurvivesLosingItsAnnotations(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(ctx, t, true)
	env.updater.script(f.machine, done("node runs the plan"))

	g.Eventually(func(g Gomega) {
		g.Expect(f.getKCP(ctx, g).Annotations).To(And(
			HaveKeyWithValue(inplacev1.SingleNodeControlPlaneAnnotation, "true"),
			HaveKeyWithValue(inplacev1.SingleNodeOptInCopiedAnnotation, "true"),
		))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "the Cluster's opt-in copied onto the KCP")

	f.dropClusterAnnotations(ctx, g)
	g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue(), "the version change after the Cluster lost its opt-in must be held")
	g.Eventually(func(g Gomega) {
		m := &clusterv1.Machine{}
		g.Expect(env.admin.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: f.machine}, m)).To(Succeed())
		g.Expect(m.Spec.Version).To(Equal(toVersion))
		g.Expect(f.getKCP(ctx, g).Annotations).NotTo(HaveKey(inplacev1.HoldAnnotation))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(f.machineCount(ctx, g)).To(Equal(1))
	g.Expect(env.updater.calls(f.machine)).NotTo(BeEmpty())
}

// TestIntegrationOptInCopyRespectsTheKCP: an explicit KCP value is never overwritten
// by the Cluster's (the decision still takes either), and a copy the operator removed
// from the KCP is not made again.
func TestIntegrationOptInCopyRespectsTheKCP(t *testing.T) {
	env.require(t)
	ctx := context.Background()
	patchKCP := func(g Gomega, f *fixture, annotations string) {
		kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cp"}}
		g.Expect(env.topology.Patch(ctx, kcp, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":`+annotations+`}}`)))).To(Succeed())
	}
	optInCluster := func(g Gomega, f *fixture) {
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name}}
		g.Expect(env.topology.Patch(ctx, cluster, client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"annotations":{"`+inplacev1.SingleNodeControlPlaneAnnotation+`":"true"}}}`)))).To(Succeed())
	}
	// touchCluster makes a Cluster event (the controller reconciles the KCP on it).
	touchCluster := func(g Gomega, f *fixture) {
		cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name}}
		g.Expect(env.topology.Patch(ctx, cluster, client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"touched":"`+time.Now().Format("150405.000000")+`"}}}`)))).To(Succeed())
	}

	t.Run("explicit KCP value", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, false)
		env.updater.script(f.machine, done("node runs the plan"))
		patchKCP(g, f, `{"`+inplacev1.SingleNodeControlPlaneAnnotation+`":"false"}`)
		optInCluster(g, f)
		g.Consistently(func(g Gomega) {
			a := f.getKCP(ctx, g).Annotations
			g.Expect(a).To(HaveKeyWithValue(inplacev1.SingleNodeControlPlaneAnnotation, "false"))
			g.Expect(a).NotTo(HaveKey(inplacev1.SingleNodeOptInCopiedAnnotation))
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeTrue(), "the Cluster's opt-in counts as well")
	})

	t.Run("copy removed from the KCP", func(t *testing.T) {
		g := NewWithT(t)
		f := newFixture(ctx, t, true)
		g.Eventually(func(g Gomega) {
			g.Expect(f.getKCP(ctx, g).Annotations).To(HaveKeyWithValue(inplacev1.SingleNodeOptInCopiedAnnotation, "true"))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		patchKCP(g, f, `{"`+inplacev1.SingleNodeControlPlaneAnnotation+`":null}`)
		touchCluster(g, f)
		g.Consistently(func(g Gomega) {
			g.Expect(f.getKCP(ctx, g).Annotations).NotTo(HaveKey(inplacev1.SingleNodeControlPlaneAnnotation))
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		// Opted out on both: KCP takes over (no hold).
		f.dropClusterAnnotations(ctx, g)
		g.Expect(held(f.setVersion(ctx, g, toVersion))).To(BeFalse())
	})
}

// TestUpstreamMarkAsDonePatchDropsConcurrentAnnotations reproduces, on a real API
// server, the cause of the lost Cluster opt-in (the upstream issue text is in
// docs/single-node.md): Cluster API v1.14.2 internal/hooks/tracking.go MarkAsDone
// (lines 98-128) removes the hook from the pending-hooks annotation of the
// controller's cached copy, deletes the emptied key and patches with
// client.MergeFrom(orig). When that key was the copy's only annotation, the merge patch
// is {"metadata":{"annotations":null}}, and the API server deletes every annotation,
// also one another client added after the cache read. The steps below are
// MarkAsDone's, on a copy read before the opt-in was added.
func TestUpstreamMarkAsDonePatchDropsConcurrentAnnotations(t *testing.T) {
	env.require(t)
	g := NewWithT(t)
	ctx := context.Background()
	const pendingHooks = "runtime.cluster.x-k8s.io/pending-hooks"
	f := newFixture(ctx, t, false)
	cluster := f.getCluster(ctx, g)
	cluster.Annotations = map[string]string{pendingHooks: "AfterControlPlaneInitialized"}
	g.Expect(env.admin.Update(ctx, cluster)).To(Succeed())
	cached := f.getCluster(ctx, g) // the topology controller's cached copy

	optInCluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: f.cluster.Name}}
	g.Expect(env.topology.Patch(ctx, optInCluster, client.RawPatch("application/merge-patch+json",
		[]byte(`{"metadata":{"annotations":{"`+inplacev1.SingleNodeControlPlaneAnnotation+`":"true"}}}`)))).To(Succeed())

	// MarkAsDone(ctx, c, cached, false, AfterControlPlaneInitialized):
	orig := cached.DeepCopy()
	annotations := cached.GetAnnotations()
	annotations[pendingHooks] = "" // removeFromCommaSeparatedList of its only entry
	delete(annotations, pendingHooks)
	cached.SetAnnotations(annotations)
	patch, err := client.MergeFrom(orig).Data(cached)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(patch)).To(Equal(`{"metadata":{"annotations":null}}`))
	g.Expect(env.admin.Patch(ctx, cached, client.MergeFrom(orig))).To(Succeed())

	g.Expect(f.getCluster(ctx, g).Annotations).NotTo(HaveKey(inplacev1.SingleNodeControlPlaneAnnotation),
		"the upstream patch deletes the opt-in added after the cache read")
}

// TestOptedIn pins the one opt-in rule (inplacev1.SingleNodeOptedIn) that the
// single-node path shares with the admission guard and `capi-inplace plan`: the
// Cluster's or the KubeadmControlPlane's annotation, value "true", each alone enough.
func TestOptedIn(t *testing.T) {
	const optIn = inplacev1.SingleNodeControlPlaneAnnotation
	for _, tc := range []struct {
		name         string
		cluster, kcp map[string]string
		want         bool
	}{
		{"neither", nil, nil, false},
		{"the Cluster alone", map[string]string{optIn: "true"}, nil, true},
		{"the KubeadmControlPlane alone", nil, map[string]string{optIn: "true"}, true},
		{"both", map[string]string{optIn: "true"}, map[string]string{optIn: "true"}, true},
		{"values other than true", map[string]string{optIn: "yes"}, map[string]string{optIn: "false"}, false},
		{"the KubeadmControlPlane says false, the Cluster true", map[string]string{optIn: "true"}, map[string]string{optIn: "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Annotations: tc.cluster}}
			kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Annotations: tc.kcp}}
			g.Expect(OptedIn(cluster) || KCPOptedIn(kcp)).To(Equal(tc.want))
			g.Expect(inplacev1.SingleNodeOptedIn(tc.cluster, tc.kcp)).To(Equal(tc.want))
		})
	}
	NewWithT(t).Expect(OptedIn(nil) || KCPOptedIn(nil)).To(BeFalse())
}
