package drain

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/coordinatortest"
)

var env *coordinatortest.Env

func TestMain(m *testing.M) { os.Exit(coordinatortest.Main(m, true, &env)) }

func testClients(t *testing.T) (client.Client, kubernetes.Interface) {
	t.Helper()
	c := testClient(t)
	cs, err := kubernetes.NewForConfig(env.Require(t))
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

func testClient(t *testing.T) client.Client {
	t.Helper()
	cfg := env.Require(t)
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = clusterv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func controlled(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: "0b4d7c1e-0000-4000-8000-000000000001", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "mdr-node", TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
}

func drainRule(name string, behavior clusterv1.MachineDrainRuleDrainBehavior, order *int32, podLabels, machineLabels, clusterLabels map[string]string) *clusterv1.MachineDrainRule {
	r := &clusterv1.MachineDrainRule{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: clusterv1.MachineDrainRuleSpec{Drain: clusterv1.MachineDrainRuleDrainConfig{Behavior: behavior, Order: order},
			Pods: []clusterv1.MachineDrainRulePodSelector{{Selector: &metav1.LabelSelector{MatchLabels: podLabels}}}}}
	if machineLabels != nil || clusterLabels != nil {
		r.Spec.Machines = []clusterv1.MachineDrainRuleMachineSelector{{Selector: &metav1.LabelSelector{MatchLabels: machineLabels},
			ClusterSelector: &metav1.LabelSelector{MatchLabels: clusterLabels}}}
	}
	return r
}

func podNames(ctx context.Context, g Gomega, c client.Client, ns string) []string {
	pods := &corev1.PodList{}
	g.Expect(c.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

// TestAttemptMachineHonoursMachineDrainRules: against a real API server with
// Cluster API's CRDs, the rules that apply to the Machine (by Machine and Cluster
// labels) decide: a Skip pod stays, a WaitCompleted pod is waited for until it is
// gone, a pod of a higher drain order is evicted only after the lower order is
// gone; a rule for other Machines changes nothing; a pod without a controller
// blocks the drain (nothing evicted) unless Force.
func TestAttemptMachineHonoursMachineDrainRules(t *testing.T) {
	g := NewWithT(t)
	c, cs := testClients(t)
	ctx := context.Background()
	ns := "mdr"
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	for _, r := range []*clusterv1.MachineDrainRule{
		drainRule("a-skip-logger", clusterv1.MachineDrainRuleDrainBehaviorSkip, nil, map[string]string{"app": "logger"}, map[string]string{"pool": "workers"}, map[string]string{"env": "prod"}),
		drainRule("b-wait-batch", clusterv1.MachineDrainRuleDrainBehaviorWaitCompleted, nil, map[string]string{"app": "batch"}, nil, nil),
		drainRule("c-db-last", clusterv1.MachineDrainRuleDrainBehaviorDrain, ptr.To[int32](10), map[string]string{"app": "db"}, nil, nil),
		drainRule("d-skip-web-elsewhere", clusterv1.MachineDrainRuleDrainBehaviorSkip, nil, map[string]string{"app": "web"}, map[string]string{"pool": "other"}, nil),
	} {
		g.Expect(c.Create(ctx, r)).To(Succeed())
		defer func() { _ = c.Delete(ctx, r) }()
	}
	for _, p := range []*corev1.Pod{
		controlled(ns, "web", map[string]string{"app": "web"}),
		controlled(ns, "logger", map[string]string{"app": "logger"}),
		controlled(ns, "batch", map[string]string{"app": "batch"}),
		controlled(ns, "db", map[string]string{"app": "db"}),
	} {
		g.Expect(c.Create(ctx, p)).To(Succeed())
	}
	m := Machine{Management: c, Workload: c, Evictions: cs,
		Cluster: &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1", Labels: map[string]string{"env": "prod"}}},
		Machine: &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m1", Labels: map[string]string{"pool": "workers"}}}}
	opts := Options{Budget: 5 * time.Second}

	res, err := AttemptMachine(ctx, m, "mdr-node", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Done).To(BeFalse())
	g.Expect(res.Blockers).To(BeEmpty())
	g.Expect(res.Skipped).To(ConsistOf(ns + "/logger"))
	g.Expect(res.Waiting).To(ConsistOf(
		Blocker{Pod: ns + "/batch", Reason: ReasonWaitCompleted},
		Blocker{Pod: ns + "/db", Reason: ReasonDrainOrder}))
	g.Expect(res.Terminating).To(ConsistOf(ns + "/web"))
	g.Eventually(func(g Gomega) []string { return podNames(ctx, g, c, ns) }).Should(ConsistOf("logger", "batch", "db"),
		"web evicted (the rule for other Machines does not apply), db waits for its order")

	// The batch pod completes and goes: the next order is drained.
	g.Expect(c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"}})).To(Succeed())
	res, err = AttemptMachine(ctx, m, "mdr-node", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Terminating).To(ConsistOf(ns + "/db"))
	g.Eventually(func(g Gomega) []string { return podNames(ctx, g, c, ns) }).Should(ConsistOf("logger"))
	res, err = AttemptMachine(ctx, m, "mdr-node", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Done).To(BeTrue(), "the Skip pod stays and the node counts as drained: %s", res.Summary())

	// The same rules on a Machine of another pool: the logger rule does not apply.
	other := m
	other.Machine = &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m2", Labels: map[string]string{"pool": "other"}}}
	bare := controlled(ns, "bare", nil)
	bare.OwnerReferences = nil
	g.Expect(c.Create(ctx, bare)).To(Succeed())
	res, err = AttemptMachine(ctx, other, "mdr-node", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Blockers).To(ConsistOf(Blocker{Pod: ns + "/bare", Reason: ReasonNoController}))
	g.Expect(res.Summary()).To(ContainSubstring("pod mdr/bare: no controller recreates it"))
	g.Consistently(func(g Gomega) []string { return podNames(ctx, g, c, ns) }, time.Second).Should(ConsistOf("logger", "bare"),
		"with a blocker nothing is evicted")
	opts.Force = true
	res, err = AttemptMachine(ctx, other, "mdr-node", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Terminating).To(ConsistOf(ns+"/bare", ns+"/logger"), "force evicts the bare pod; the logger rule is for the other pool")
}

// TestAttachedVolumes: what is still attached to the node and not used by a pod
// that stays there is waited for; a volume of a pod that stays is not.
func TestAttachedVolumes(t *testing.T) {
	g := NewWithT(t)
	c := testClient(t)
	ctx := context.Background()
	ns := "vols"
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	pv := func(name, handle, claim string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resourceOne()},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.example.com", VolumeHandle: handle}},
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: claim}}}
	}
	for _, v := range []*corev1.PersistentVolume{pv("pv-left", "h-left", "data-left"), pv("pv-stays", "h-stays", "data-stays")} {
		g.Expect(c.Create(ctx, v)).To(Succeed())
	}
	staying := controlled(ns, "agent", nil)
	staying.Spec.NodeName = "vol-node"
	staying.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-stays"}}}}
	g.Expect(c.Create(ctx, staying)).To(Succeed())
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "vol-node"}}
	g.Expect(c.Create(ctx, node)).To(Succeed())

	got, err := AttachedVolumes(ctx, c, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty(), "nothing attached")

	node.Status.VolumesAttached = []corev1.AttachedVolume{
		{Name: "kubernetes.io/csi/csi.example.com^h-left", DevicePath: "/dev/a"},
		{Name: "kubernetes.io/csi/csi.example.com^h-stays", DevicePath: "/dev/b"},
		{Name: "kubernetes.io/csi/other.example.com^orphan", DevicePath: "/dev/c"},
	}
	g.Expect(c.Status().Update(ctx, node)).To(Succeed())
	got, err = AttachedVolumes(ctx, c, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]string{"PersistentVolume pv-left", "volume kubernetes.io/csi/other.example.com^orphan"}))

	// The attach/detach controller clears the node's list; a VolumeAttachment still attached keeps the wait.
	node.Status.VolumesAttached = nil
	g.Expect(c.Status().Update(ctx, node)).To(Succeed())
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-left"}, Spec: storagev1.VolumeAttachmentSpec{
		Attacher: "csi.example.com", NodeName: "vol-node", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-left")}}}
	g.Expect(c.Create(ctx, va)).To(Succeed())
	va.Status.Attached = true
	g.Expect(c.Status().Update(ctx, va)).To(Succeed())
	got, err = AttachedVolumes(ctx, c, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal([]string{"PersistentVolume pv-left"}))

	g.Expect(c.Delete(ctx, va)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(va), &storagev1.VolumeAttachment{}))
	}).Should(BeTrue())
	got, err = AttachedVolumes(ctx, c, node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
}

func resourceOne() resource.Quantity { return resource.MustParse("1Gi") }
