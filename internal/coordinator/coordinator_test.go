package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/coordinatortest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var testEnv *coordinatortest.Env

func TestMain(m *testing.M) { os.Exit(coordinatortest.Main(m, true, &testEnv)) }

// recorder keeps the Events the coordinator records, with the object they regard.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	obj := regarding.(client.Object)
	kind := fmt.Sprintf("%T", regarding)
	r.events = append(r.events, fmt.Sprintf("%s %s/%s %s %s: %s", kind, obj.GetNamespace(), obj.GetName(), eventtype, reason, fmt.Sprintf(note, args...)))
}

func (r *recorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, strings.TrimSuffix(strings.Fields(e)[3], ":"))
	}
	return out
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// fixture is one management namespace with a Cluster, and a workload cluster (the
// same API server unless a test brings its own).
type fixture struct {
	t      *testing.T
	ctx    context.Context
	mgmt   client.Client
	wl     client.Client
	wc     *WorkloadCluster
	rec    *recorder
	ns     string
	scheme *runtime.Scheme
}

func newFixture(t *testing.T, workload *rest.Config) *fixture {
	t.Helper()
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	if workload == nil {
		workload = cfg
	}
	f := &fixture{t: t, ctx: context.Background(), rec: &recorder{}, scheme: testScheme(t)}
	var err error
	f.mgmt, err = client.New(cfg, client.Options{Scheme: f.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	f.wc, err = NewWorkloadCluster(workload, f.scheme, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	f.wl = f.wc.Client
	f.ns = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(f.ns) > 50 {
		f.ns = f.ns[:50]
	}
	for _, c := range []client.Client{f.mgmt, f.wl} {
		for _, ns := range []string{f.ns, inplacev1.AgentNamespace} {
			// The test namespace opted in (on the management side; on a shared API
			// server the label is harmless on the workload side).
			labels := map[string]string{inplacev1.NamespaceEnabledLabel: "true"}
			g.Expect(client.IgnoreAlreadyExists(c.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}))).To(Succeed())
		}
	}
	g.Expect(f.mgmt.Create(f.ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c1"},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "10.0.0.1", Port: 6443}},
	})).To(Succeed())
	return f
}

// dedicatedWorkload starts a second API server to serve as a workload cluster of
// its own, for tests that look at all the cluster's Nodes.
func dedicatedWorkload(t *testing.T) *rest.Config {
	t.Helper()
	testEnv.Require(t)
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start workload envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

func (f *fixture) coordinator(mutate ...func(*Options)) *Coordinator {
	f.t.Helper()
	// Tests script the agent between calls, so calls answer at once unless a test
	// asks for lingering (TestLingerAnswersDoneWithinTheCall).
	opts := Options{Client: f.mgmt, Clusters: StaticClusters{Cluster: f.wc}, Recorder: f.rec, Linger: -1}
	for _, m := range mutate {
		m(&opts)
	}
	c, err := New(opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// node creates a Node reporting kubelet version and Ready.
func (f *fixture) node(name, version string, controlPlane bool) *corev1.Node {
	f.t.Helper()
	g := NewWithT(f.t)
	// The agent's key, as a running agent publishes it (plans are sealed to it).
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		Annotations: map[string]string{inplacev1.AgentKeyAnnotation: protocol.FormatAgentKey(testAgentKey.PublicKey())}}}
	if controlPlane {
		n.Labels[controlPlaneNodeLabel] = ""
	}
	g.Expect(f.wl.Create(f.ctx, n)).To(Succeed())
	f.setKubelet(name, version)
	return n
}

func (f *fixture) setKubelet(name, version string) {
	f.t.Helper()
	g := NewWithT(f.t)
	n := &corev1.Node{}
	g.Expect(f.wl.Get(f.ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	n.Status.NodeInfo.KubeletVersion = version
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	g.Expect(f.wl.Status().Update(f.ctx, n)).To(Succeed())
}

// machine creates a Machine whose status.nodeRef names nodeName ("" for none), with
// its KubeadmConfig and DevMachine, marked for an in-place update as Cluster API's
// owner controllers mark it before the Machine controller calls UpdateMachine.
func (f *fixture) machine(name, nodeName, version string, controlPlane bool) *clusterv1.Machine {
	f.t.Helper()
	g := NewWithT(f.t)
	g.Expect(f.mgmt.Create(f.ctx, &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name,
		Annotations: map[string]string{clusterv1.UpdateInProgressAnnotation: ""}}})).To(Succeed())
	infra := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"image": "os-a"}}}
	infra.SetGroupVersionKind(schema.GroupVersionKind{Group: coordinatortest.InfraMachineGroup, Version: coordinatortest.InfraMachineVersion, Kind: coordinatortest.InfraMachineKind})
	infra.SetNamespace(f.ns)
	infra.SetName(name)
	infra.SetAnnotations(map[string]string{clusterv1.UpdateInProgressAnnotation: ""})
	g.Expect(f.mgmt.Create(f.ctx, infra)).To(Succeed())
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"},
			Annotations: map[string]string{clusterv1.UpdateInProgressAnnotation: "", runtimev1.PendingHooksAnnotation: "UpdateMachine"}},
		Spec: clusterv1.MachineSpec{
			ClusterName:       "c1",
			Version:           version,
			Bootstrap:         clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachine", Name: name},
		},
	}
	if controlPlane {
		m.Labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	g.Expect(f.mgmt.Create(f.ctx, m)).To(Succeed())
	if nodeName != "" {
		m.Status.NodeRef = clusterv1.MachineNodeReference{Name: nodeName}
		g.Expect(f.mgmt.Status().Update(f.ctx, m)).To(Succeed())
	}
	return m
}

// request stores cfg's spec (when not nil) as the Machine's KubeadmConfig, as the
// owner controller does before it marks the Machine, and returns what CAPI's Machine
// controller then sends: the stored Machine, KubeadmConfig and DevMachine, trimmed to
// metadata and spec (cleanupMachine and cleanupUnstructured upstream).
func (f *fixture) request(m *clusterv1.Machine, cfg *bootstrapv1.KubeadmConfig) *runtimehooksv1.UpdateMachineRequest {
	f.t.Helper()
	g := NewWithT(f.t)
	key := client.ObjectKeyFromObject(m)
	if cfg != nil {
		stored := &bootstrapv1.KubeadmConfig{}
		g.Expect(f.mgmt.Get(f.ctx, key, stored)).To(Succeed())
		stored.Spec = cfg.Spec
		g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
	}
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, key, stored)).To(Succeed())
	desired := clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Namespace: stored.Namespace, Name: stored.Name, Labels: stored.Labels, Annotations: stored.Annotations},
		Spec:       stored.Spec,
	}
	req := &runtimehooksv1.UpdateMachineRequest{Desired: runtimehooksv1.UpdateMachineRequestObjects{Machine: desired}}
	req.Desired.BootstrapConfig.Raw = f.trimmed(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"), key)
	req.Desired.InfrastructureMachine.Raw = f.trimmed(schema.GroupVersionKind{Group: coordinatortest.InfraMachineGroup, Version: coordinatortest.InfraMachineVersion, Kind: coordinatortest.InfraMachineKind}, key)
	return req
}

// trimmed reads an object and encodes it as CAPI puts it into a hook request.
func (f *fixture) trimmed(gvk schema.GroupVersionKind, key client.ObjectKey) []byte {
	f.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := f.mgmt.Get(f.ctx, key, u); err != nil {
		f.t.Fatal(err)
	}
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "spec": u.Object["spec"]}}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetLabels(u.GetLabels())
	out.SetAnnotations(u.GetAnnotations())
	b, err := json.Marshal(out.Object)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// call calls UpdateMachine and waits for the report writes it left pending
// (laterreports.go), so that a test reads the Machine as the call left it.
func call(c *Coordinator, req *runtimehooksv1.UpdateMachineRequest) *runtimehooksv1.UpdateMachineResponse {
	resp := &runtimehooksv1.UpdateMachineResponse{}
	c.UpdateMachine(context.Background(), req, resp)
	if err := c.WaitForReports(context.Background()); err != nil {
		panic(err) // context.Background never ends
	}
	return resp
}

// callUntil calls until the message contains want, at most n times.
func callUntil(t *testing.T, c *Coordinator, req *runtimehooksv1.UpdateMachineRequest, want string, n int) *runtimehooksv1.UpdateMachineResponse {
	t.Helper()
	var resp *runtimehooksv1.UpdateMachineResponse
	for range n {
		resp = call(c, req)
		if strings.Contains(resp.Message, want) {
			return resp
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after %d calls the message is %q (status %s), want it to contain %q", n, resp.Message, resp.Status, want)
	return nil
}

func (f *fixture) getNode(name string) *corev1.Node {
	f.t.Helper()
	n := &corev1.Node{}
	if err := f.wl.Get(f.ctx, client.ObjectKey{Name: name}, n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// agentReports plays the agent: it writes its annotations on its node.
func (f *fixture) agentReports(node string, st protocol.NodeStatus, committed bool) {
	f.t.Helper()
	g := NewWithT(f.t)
	v, err := protocol.EncodeStatus(st)
	g.Expect(err).NotTo(HaveOccurred())
	n := f.getNode(node)
	before := n.DeepCopy()
	n.Annotations[inplacev1.StatusAnnotation] = v
	n.Annotations[inplacev1.StateAnnotation] = string(st.Phase)
	if committed {
		n.Annotations[inplacev1.CurrentPlanAnnotation] = st.PlanHash
	}
	g.Expect(f.wl.Patch(f.ctx, n, client.MergeFrom(before))).To(Succeed())
}

func (f *fixture) planSecret(node string) *corev1.Secret {
	f.t.Helper()
	s := &corev1.Secret{}
	if err := f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(node)}, s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

func (f *fixture) pod(name, node string, labels map[string]string, owner metav1.OwnerReference, annotations map[string]string) {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	if owner.Name != "" {
		p.OwnerReferences = []metav1.OwnerReference{owner}
	}
	if err := f.wl.Create(f.ctx, p); err != nil {
		f.t.Fatal(err)
	}
	// Running and Ready, as a kubelet would report it: the API server ignores PDBs
	// for pending pods.
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := f.wl.Status().Update(f.ctx, p); err != nil {
		f.t.Fatal(err)
	}
}

// barePod is a pod without a controller.
func (f *fixture) barePod(name, node string) {
	f.t.Helper()
	f.pod(name, node, nil, metav1.OwnerReference{}, nil)
}

func (f *fixture) podExists(name string) bool {
	err := f.wl.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &corev1.Pod{})
	return err == nil
}

func controllerRef(kind, name string, uid string) metav1.OwnerReference {
	api := "apps/v1"
	return metav1.OwnerReference{APIVersion: api, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}
}

func (f *fixture) blockingPDB(name string, selector map[string]string) {
	f.t.Helper()
	// Without kube-controller-manager the PDB's status is never computed, so the API
	// server refuses every eviction it covers: exactly a blocking budget.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: selector},
		},
	}
	if err := f.wl.Create(f.ctx, pdb); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) daemonSet(name string) *appsv1.DaemonSet {
	f.t.Helper()
	sel := map[string]string{"ds": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		},
	}
	if err := f.wl.Create(f.ctx, ds); err != nil {
		f.t.Fatal(err)
	}
	return ds
}
