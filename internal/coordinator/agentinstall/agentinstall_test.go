package agentinstall

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/coordinatortest"
)

var testEnv *coordinatortest.Env

func TestMain(m *testing.M) { os.Exit(coordinatortest.Main(m, false, &testEnv)) }

// TestAgentServesMetrics: the installed agent serves its metrics by default, on
// MetricsPort of its node (host network), declared on the container and
// annotated for scraping; overridden arguments are taken as given.
func TestAgentServesMetrics(t *testing.T) {
	g := NewWithT(t)
	daemonSetOf := func(cfg Config) *appsv1.DaemonSet {
		objs, err := Objects(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				return ds
			}
		}
		t.Fatal("no DaemonSet")
		return nil
	}
	ds := daemonSetOf(Config{Image: "agent:v1"})
	pod := ds.Spec.Template
	g.Expect(pod.Spec.HostNetwork).To(BeTrue(), "the port is the node's")
	g.Expect(pod.Spec.Containers).To(HaveLen(1))
	c := pod.Spec.Containers[0]
	g.Expect(c.Args).To(ContainElement("--metrics-addr=:9442"))
	g.Expect(c.Ports).To(Equal([]corev1.ContainerPort{{Name: "metrics", ContainerPort: 9442, HostPort: 9442, Protocol: corev1.ProtocolTCP}}))
	g.Expect(pod.Annotations).To(Equal(map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9442", "prometheus.io/path": "/metrics"}))
	// Requests so that the scheduler and the kubelet count the agent; no limit, which
	// would OOM-kill an update half-way (kubeadm and etcd restores run in its cgroup).
	g.Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceCPU))
	g.Expect(c.Resources.Requests).To(HaveKey(corev1.ResourceMemory))
	g.Expect(c.Resources.Limits).To(BeEmpty())

	custom := daemonSetOf(Config{Image: "agent:v1", Args: []string{"agent", "-v=1"}})
	g.Expect(custom.Spec.Template.Spec.Containers[0].Args).To(Equal([]string{"agent", "-v=1"}), "overridden arguments are taken as given")
}

func TestObjectsHashFollowsImage(t *testing.T) {
	tests := []struct {
		name     string
		a, b     Config
		sameHash bool
	}{
		{"same config", Config{Image: "agent:v1"}, Config{Image: "agent:v1"}, true},
		{"new image", Config{Image: "agent:v1"}, Config{Image: "agent:v2"}, false},
		{"new args", Config{Image: "agent:v1"}, Config{Image: "agent:v1", Args: []string{"agent", "-v=1"}}, false},
		{"a CEL gate appears", Config{Image: "agent:v1"}, Config{Image: "agent:v1", CELGates: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			a, err := Objects(tt.a)
			g.Expect(err).NotTo(HaveOccurred())
			b, err := Objects(tt.b)
			g.Expect(err).NotTo(HaveOccurred())
			ha := a[len(a)-1].GetAnnotations()[ManifestHashAnnotation]
			hb := b[len(b)-1].GetAnnotations()[ManifestHashAnnotation]
			g.Expect(ha).NotTo(BeEmpty())
			g.Expect(ha == hb).To(Equal(tt.sameHash))
		})
	}
	_, err := Objects(Config{})
	NewWithT(t).Expect(err).To(HaveOccurred())
}

func TestEnsureInstallsOnceAndUpgrades(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())

	applied, err := Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())

	ds := &appsv1.DaemonSet{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: AgentName}, ds)).To(Succeed())
	g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example/capi-inplace:v1"))
	// systemd's D-Bus refuses a client in another PID namespace.
	g.Expect(ds.Spec.Template.Spec.HostPID).To(BeTrue())
	g.Expect(ds.Spec.Template.Spec.HostIPC).To(BeFalse())
	g.Expect(ds.Spec.Template.Spec.Containers[0].Env[0].ValueFrom.FieldRef.FieldPath).To(Equal("spec.nodeName"))
	var managers []string
	for _, mf := range ds.ManagedFields {
		managers = append(managers, mf.Manager)
	}
	g.Expect(managers).To(ContainElement(FieldManager))
	rv := ds.ResourceVersion

	applied, err = Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse(), "up to date: nothing applied")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
	g.Expect(ds.ResourceVersion).To(Equal(rv))

	applied, err = Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v2"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "new image: upgraded")
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
	g.Expect(ds.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example/capi-inplace:v2"))
}

// agentClient impersonates the agent's service account as the API server sees a
// pod-bound token of a pod on nodeName (nodeName "" leaves out the claim).
func agentClient(t *testing.T, cfg *rest.Config, nodeName string) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUsername(),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + inplacev1.AgentNamespace, "system:authenticated"},
	}
	if nodeName != "" {
		cfg.Impersonate.Extra = map[string][]string{NodeNameExtra: {nodeName}}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestAgentConfinedToOwnNode(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v1"})
	g.Expect(err).NotTo(HaveOccurred())

	for _, n := range []string{"node-a", "node-b"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": "1"}}}
		g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, node))).To(Succeed())
	}
	otherNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, otherNS))).To(Succeed())
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "s"}}))).To(Succeed())
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName("node-a")}}))).To(Succeed())

	agentA := agentClient(t, cfg, "node-a")
	patch := func(cs kubernetes.Interface, node, body string) error {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	stateOnly := `{"metadata":{"annotations":{"` + inplacev1.StateAnnotation + `":"Applying"}}}`

	// The policy is loaded asynchronously after it is created: wait until it bites.
	g.Eventually(func() error { return patch(agentA, "node-b", stateOnly) }, 20*time.Second, 200*time.Millisecond).
		Should(MatchError(ContainSubstring("may only modify the node it runs on")))

	tests := []struct {
		name    string
		cs      kubernetes.Interface
		node    string
		body    string
		wantErr string
	}{
		{"own node, own annotations", agentA, "node-a", stateOnly, ""},
		{"own node, status annotation", agentA, "node-a", `{"metadata":{"annotations":{"` + inplacev1.StatusAnnotation + `":"{}","` + inplacev1.CurrentPlanAnnotation + `":"abc"}}}`, ""},
		{"own node, its key", agentA, "node-a", `{"metadata":{"annotations":{"` + inplacev1.AgentKeyAnnotation + `":"x25519:a"}}}`, ""},
		{"another node", agentA, "node-b", stateOnly, "may only modify the node it runs on"},
		{"own node, its staging status", agentA, "node-a", `{"metadata":{"annotations":{"` + inplacev1.StagingStatusAnnotation + `":"{}"}}}`, ""},
		{"own node, the stage request", agentA, "node-a", `{"metadata":{"annotations":{"` + inplacev1.StagePlanAnnotation + `":"x"}}}`, "may only change its own annotations"},
		{"another node's key", agentA, "node-b", `{"metadata":{"annotations":{"` + inplacev1.AgentKeyAnnotation + `":"x25519:a"}}}`, "may only modify the node it runs on"},
		{"no node claim", agentClient(t, cfg, ""), "node-a", stateOnly, "may only modify the node it runs on"},
		{"coordinator's annotation", agentA, "node-a", `{"metadata":{"annotations":{"` + inplacev1.DesiredPlanAnnotation + `":"x"}}}`, "may only change its own annotations"},
		{"foreign annotation", agentA, "node-a", `{"metadata":{"annotations":{"example.com/x":"y"}}}`, "may only change its own annotations"},
		{"labels", agentA, "node-a", `{"metadata":{"labels":{"zone":"2"}}}`, "may not change node labels or spec"},
		{"uncordon itself", agentA, "node-a", `{"spec":{"unschedulable":true}}`, "may not change node labels or spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := patch(tt.cs, tt.node, tt.body)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}

	t.Run("secrets: own namespace readable, others not (RBAC)", func(t *testing.T) {
		g := NewWithT(t)
		_, err := agentA.CoreV1().Secrets(inplacev1.AgentNamespace).Get(ctx, inplacev1.PlanSecretName("node-a"), metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = agentA.CoreV1().Secrets("elsewhere").Get(ctx, "s", metav1.GetOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		_, err = agentA.CoreV1().Secrets(inplacev1.AgentNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		// Nor can it get a token bound to another node's pod (plans are sealed to
		// each node's key, which only that node's agent may publish).
		_, err = agentA.CoreV1().ServiceAccounts(inplacev1.AgentNamespace).CreateToken(ctx, AgentName, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})

	t.Run("pods: control-plane mirror pods readable for the static-pod gate, nothing more without CEL gates", func(t *testing.T) {
		g := NewWithT(t)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kube-apiserver-node-a"},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/kube-apiserver:v1.36.0"}}},
		}
		g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, pod))).To(Succeed())
		_, err := agentA.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = agentA.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "no CEL gate, no list: got %v", err)
		_, err = agentA.CoreV1().Pods("elsewhere").Get(ctx, "p", metav1.GetOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		err = agentA.CoreV1().Pods(metav1.NamespaceSystem).Delete(ctx, pod.Name, metav1.DeleteOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		_, err = agentA.CoreV1().Pods(metav1.NamespaceSystem).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
	})
}

// TestOnlyTheAgentWritesItsAnnotations: another identity that may patch Nodes and
// nodes/status (a CNI DaemonSet's token) cannot change a node's agent key or report
// through either, while its own annotations, the node's agent and the coordinator
// (the cluster's admin, which may remove the policy anyway) still get through.
func TestOnlyTheAgentWritesItsAnnotations(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v1"})
	g.Expect(err).NotTo(HaveOccurred())

	const cniUser = "system:serviceaccount:kube-system:cni"
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cni"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"get", "patch", "update"}}}}))).To(Succeed())
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cni"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cni"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: cniUser}}}))).To(Succeed())
	cniCfg := rest.CopyConfig(cfg)
	cniCfg.Impersonate = rest.ImpersonationConfig{UserName: cniUser, Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra: map[string][]string{NodeNameExtra: {"node-guard-a"}}}
	cni, err := kubernetes.NewForConfig(cniCfg)
	g.Expect(err).NotTo(HaveOccurred())
	admin, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())

	const victim = "node-guard-b"
	report := map[string]string{
		inplacev1.AgentKeyAnnotation:    "x25519:agent",
		inplacev1.CurrentPlanAnnotation: "old",
		inplacev1.StatusAnnotation:      `{"v":1}`,
		inplacev1.StateAnnotation:       "Committed",
	}
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: victim, Annotations: report}}))).
		To(Succeed(), "the admin may create a Node with the agent's annotations")
	annotate := func(key, value string) string { // "" removes the annotation
		var v any
		if value != "" {
			v = value
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
		g.Expect(err).NotTo(HaveOccurred())
		return string(b)
	}
	patch := func(cs kubernetes.Interface, subresource, body string) error {
		var sub []string
		if subresource != "" {
			sub = []string{subresource}
		}
		_, err := cs.CoreV1().Nodes().Patch(ctx, victim, types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
		return err
	}
	// The policy is loaded asynchronously after it is created: wait until it bites.
	g.Eventually(func() error { return patch(cni, "status", annotate(inplacev1.CurrentPlanAnnotation, "forged")) }, 20*time.Second, 200*time.Millisecond).
		Should(MatchError(ContainSubstring("only the node's capi-inplace agent may change")))

	const refused = "only the node's capi-inplace agent may change"
	tests := []struct {
		name        string
		cs          kubernetes.Interface
		subresource string
		body        string
		wantErr     string
	}{
		{"another identity forges done through nodes/status", cni, "status", annotate(inplacev1.CurrentPlanAnnotation, "forged"), refused},
		{"another identity swaps the key through nodes/status", cni, "status", annotate(inplacev1.AgentKeyAnnotation, "x25519:attacker"), refused},
		{"another identity forges a report through nodes/status", cni, "status", annotate(inplacev1.StatusAnnotation, `{"v":1,"phase":"Committed"}`), refused},
		{"another identity forges staging through nodes/status", cni, "status", annotate(inplacev1.StagingStatusAnnotation, `{}`), refused},
		{"another identity removes the report through nodes/status", cni, "status", annotate(inplacev1.StatusAnnotation, ""), refused},
		{"another identity swaps the key through nodes", cni, "", annotate(inplacev1.AgentKeyAnnotation, "x25519:attacker"), refused},
		{"another identity's own annotation through nodes/status", cni, "status", annotate("flannel.alpha.coreos.com/public-ip", "10.0.0.2"), ""},
		{"another identity's own annotation through nodes", cni, "", annotate("example.com/cni", "y"), ""},
		{"the node's agent reports", agentClient(t, cfg, victim), "", annotate(inplacev1.StateAnnotation, "Applying"), ""},
		{"another node's agent", agentClient(t, cfg, "node-guard-a"), "", annotate(inplacev1.StateAnnotation, "Applying"), "may only modify the node it runs on"},
		{"the coordinator withdraws the report", admin, "", annotate(inplacev1.StatusAnnotation, ""), ""},
		{"the coordinator through nodes/status", admin, "status", annotate(inplacev1.StateAnnotation, ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			before, err := admin.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			err = patch(tt.cs, tt.subresource, tt.body)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "got %v", err)
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			after, err := admin.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, k := range AgentAnnotations() {
				g.Expect(after.Annotations[k]).To(Equal(before.Annotations[k]), k)
			}
		})
	}
}

// TestGuardedReadsThePolicyAndBinding: Guarded answers nil only while the policy
// and a denying binding are installed, at GuardVersion, since the given time.
func TestGuardedReadsThePolicyAndBinding(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:v1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(EnsureGuard(ctx, c)).To(Succeed())
	installed := time.Now().Add(time.Second)
	_, err = Guarded(ctx, c, installed)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Guarded(ctx, c, time.Time{})
	g.Expect(err).NotTo(HaveOccurred())

	unguarded := func(since time.Time, reason string) {
		t.Helper()
		var ue *UnguardedError
		_, err := Guarded(ctx, c, since)
		g.Expect(errors.As(err, &ue)).To(BeTrue(), "got %v", err)
		g.Expect(ue.Reason).To(ContainSubstring(reason))
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: PolicyName}, binding)).To(Succeed())
	binding.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}
	g.Expect(c.Update(ctx, binding)).To(Succeed())
	unguarded(installed, "does not deny")

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: PolicyName}, policy)).To(Succeed())
	delete(policy.Annotations, GuardVersionAnnotation)
	g.Expect(c.Update(ctx, policy)).To(Succeed())
	unguarded(installed, "older than")

	deleted := time.Now()
	g.Expect(c.Delete(ctx, binding)).To(Succeed())
	unguarded(installed, "is missing")

	// Installed again: a value written before may have come from anyone.
	time.Sleep(1100 * time.Millisecond) // creation times have a resolution of one second
	g.Expect(EnsureGuard(ctx, c)).To(Succeed())
	unguarded(deleted, "after")
	at, err := Guarded(ctx, c, time.Time{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(at).To(BeTemporally(">", deleted))
	_, err = Guarded(ctx, c, at)
	g.Expect(err).NotTo(HaveOccurred(), "installed at the very time given")
}

// TestEnsureGrantsPodListForCELGatesOnly: the agent may list pods (what a CEL gate
// reads) only while the cluster's policy has a CEL gate, and Ensure re-applies the
// ClusterRole when that changes, both ways.
func TestEnsureGrantsPodListForCELGatesOnly(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	ctx := context.Background()
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	agent := agentClient(t, cfg, "node-cel")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "app-node-cel"},
		Spec:       corev1.PodSpec{NodeName: "node-cel", Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:v1"}}},
	}
	g.Expect(client.IgnoreAlreadyExists(c.Create(ctx, pod))).To(Succeed())
	listPods := func() error {
		_, err := agent.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-cel"})
		return err
	}
	podRules := func(g Gomega) []rbacv1.PolicyRule {
		role := &rbacv1.ClusterRole{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: AgentName}, role)).To(Succeed())
		var out []rbacv1.PolicyRule
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "pods") {
				out = append(out, r)
			}
		}
		return out
	}
	forbidden := func(err error) bool { return apierrors.IsForbidden(err) }

	for _, step := range []struct {
		name     string
		celGates bool
	}{{"no CEL gate", false}, {"the policy gains a CEL gate", true}, {"the CEL gate is gone", false}} {
		t.Run(step.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:cel", CELGates: step.celGates})
			g.Expect(err).NotTo(HaveOccurred())
			// Up to date now: a second call applies nothing.
			applied, err := Ensure(ctx, c, Config{Image: "registry.example/capi-inplace:cel", CELGates: step.celGates})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(applied).To(BeFalse())
			if !step.celGates {
				g.Expect(podRules(g)).To(BeEmpty())
				// RBAC reaches the authorizer through an informer: wait for it.
				g.Eventually(listPods, 10*time.Second, 100*time.Millisecond).Should(Satisfy(forbidden))
				return
			}
			g.Expect(podRules(g)).To(Equal([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}}))
			g.Eventually(listPods, 10*time.Second, 100*time.Millisecond).Should(Succeed())
			_, err = agent.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-cel"})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list only, no watch: got %v", err)
			_, err = agent.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, pod.Name, metav1.GetOptions{})
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "list only, no get: got %v", err)
		})
	}
}
