package guard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestGuardAgainstAPIServer runs the guard behind a real kube-apiserver (envtest, with
// Cluster API's CRDs and the Dev provider's) that calls it over HTTPS through a
// ValidatingWebhookConfiguration with the guard's own registration and the
// namespaceSelector of config/webhook. Writes go through kubectl (server-side apply),
// as an operator makes them: each refused write prints the planner's reason, and no
// object in the namespace changes.
func TestGuardAgainstAPIServer(t *testing.T) {
	testenv.RequireAssets(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	hook := guard.ValidatingWebhook(admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "capi-inplace-system", Name: "capi-inplace", Path: ptr.To(guard.WebhookPath)},
	})
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}
	te := testenv.StartT(t, testenv.Options{
		CAPI:           []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane, testenv.KubeadmBootstrap, testenv.DockerInfra},
		ContractLabels: true,
		Webhooks: envtest.WebhookInstallOptions{ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-guard"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{hook},
		}}},
	})
	env, cfg := te.Environment, te.Config
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme, apiextensionsv1.AddToScheme, runtimev1.AddToScheme} {
		g.Expect(add(scheme)).To(Succeed())
	}
	wio := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	g.Expect(err).NotTo(HaveOccurred())
	// The binary's reader: the manager's cache, typed and unstructured.
	cached, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper(), Cache: &client.CacheOptions{Reader: mgr.GetCache(), Unstructured: true}})
	g.Expect(err).NotTo(HaveOccurred())
	pl, err := planner.New(policy.Builtin())
	g.Expect(err).NotTo(HaveOccurred())
	reg := prometheus.NewRegistry()
	metrics, err := guard.NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred())
	// Secrets are read live, as the extension's Secret cache reads what it does not hold.
	secrets, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(guard.Register(mgr.GetWebhookServer(), guard.Options{
		Reader: cached, Secrets: secrets, Planner: pl, Policy: policy.Builtin(), Metrics: metrics, Recorder: mgr.GetEventRecorder("capi-inplace-guard"),
		ExtensionConfig: "capi-inplace",
	})).To(Succeed())
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	user, err := env.AddUser(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kc, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(kubeconfig, kc, 0o600)).To(Succeed())

	// fleet is opted in; other is not. Both hold the same ClusterClass-style cluster;
	// plain holds a cluster without topology.
	classy := previewtest.Default()
	other := previewtest.Default()
	other.Namespace = "other"
	plain := previewtest.Default()
	plain.Namespace, plain.Topology = "plain", false
	for _, fx := range []previewtest.Options{classy, other, plain} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace}}
		if fx.Namespace != "other" {
			ns.Labels = map[string]string{inplacev1.NamespaceEnabledLabel: "true"}
		}
		g.Expect(admin.Create(ctx, ns)).To(Succeed())
		createFixture(ctx, t, admin, fx)
	}

	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// Each apply is its own field manager, so that a later partial apply never drops
	// a field an earlier one set (server-side apply removes a manager's fields that its
	// next configuration leaves out).
	applies := 0
	apply := func(doc string) (string, error) {
		applies++
		return kubectl(doc, "apply", "--server-side", "--force-conflicts", fmt.Sprintf("--field-manager=operator-%d", applies), "-f", "-")
	}
	// refused applies doc and expects the guard's refusal naming says, with no object
	// of the namespace changed.
	refused := func(t *testing.T, ns, doc string, says ...string) {
		t.Helper()
		g := NewWithT(t)
		// The guard reads through a cache: wait until it holds the fixture.
		before := resourceVersions(ctx, t, admin, ns)
		var out string
		g.Eventually(func() string {
			out, _ = apply(doc)
			return out
		}, 20*time.Second, 250*time.Millisecond).Should(ContainSubstring("capi-inplace guard"))
		g.Expect(out).To(ContainSubstring("denied the request"))
		g.Expect(out).To(ContainSubstring("instead of updating them in-place"))
		for _, s := range says {
			g.Expect(out).To(ContainSubstring(s))
		}
		g.Expect(resourceVersions(ctx, t, admin, ns)).To(Equal(before), "a refused write changes nothing")
	}

	t.Run("ClusterClass: Cluster.spec.topology two minors up is refused with the field", func(t *testing.T) {
		refused(t, "fleet", "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: fleet}\nspec: {topology: {version: v1.37.0}}\n",
			"Cluster fleet/demo", "spec.version", "v1.37.0")
	})
	t.Run("the same write in a namespace not opted in goes through", func(t *testing.T) {
		g := NewWithT(t)
		out, err := apply("apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: other}\nspec: {topology: {version: v1.37.0}}\n")
		g.Expect(err).NotTo(HaveOccurred(), out)
	})
	t.Run("plain: KubeadmControlPlane bootstrap-only field is refused", func(t *testing.T) {
		refused(t, "plain", "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec: {kubeadmConfigSpec: {preKubeadmCommands: [echo hi]}}\n",
			"KubeadmControlPlane plain/demo-cp", "spec.preKubeadmCommands", "demo-cp-0")
	})
	t.Run("plain: MachineDeployment pointing at a template that does not exist is refused", func(t *testing.T) {
		refused(t, "plain", "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0, namespace: plain}\n"+
			"spec: {clusterName: demo, template: {spec: {clusterName: demo, infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: nope}}}}\n",
			"MachineDeployment plain/demo-md-0", "DevMachineTemplate nope was not found")
	})
	t.Run("plain: MachineDeployment maxUnavailable 0 with a version change is refused", func(t *testing.T) {
		refused(t, "plain", "apiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0, namespace: plain}\n"+
			"spec: {clusterName: demo, rollout: {strategy: {rollingUpdate: {maxUnavailable: 0, maxSurge: 1}}}, template: {spec: {clusterName: demo, version: v1.35.2}}}\n",
			"maxUnavailable 0")
	})
	t.Run("KubeadmConfigTemplate changed under its name is refused", func(t *testing.T) {
		refused(t, "plain", "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfigTemplate\nmetadata: {name: demo-md-0-v1, namespace: plain}\n"+
			"spec: {template: {spec: {preKubeadmCommands: [echo hi]}}}\n",
			"KubeadmConfigTemplate plain/demo-md-0-v1", "preKubeadmCommands", "demo-md-0-v1-0")
	})
	t.Run("infrastructure template OS image the policy does not map is refused", func(t *testing.T) {
		refused(t, "fleet", "apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: DevMachineTemplate\nmetadata: {name: demo-md-0-v1, namespace: fleet}\n"+
			"spec: {template: {spec: {backend: {docker: {customImage: registry.example/node-os:9.9}}}}}\n",
			"DevMachineTemplate fleet/demo-md-0-v1", "customImage")
	})
	t.Run("an unhealthy control-plane Machine refuses a KubeadmControlPlane change", func(t *testing.T) {
		g := NewWithT(t)
		m := &clusterv1.Machine{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "plain", Name: "demo-cp-1"}, m)).To(Succeed())
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{
			Type: controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition, Status: metav1.ConditionFalse,
			Reason: "PodFailed", LastTransitionTime: metav1.Now(),
		})
		g.Expect(admin.Status().Update(ctx, m)).To(Succeed())
		refused(t, "plain", "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec: {version: v1.35.2}\n",
			"demo-cp-1 is not healthy", "APIServerPodHealthy")
		meta.RemoveStatusCondition(&m.Status.Conditions, controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition)
		g.Expect(admin.Status().Update(ctx, m)).To(Succeed())
	})
	t.Run("MachineSet deletion with Machines is refused", func(t *testing.T) {
		g := NewWithT(t)
		out, err := kubectl("", "delete", "machineset", "-n", "plain", "demo-md-0-v1", "--wait=false")
		g.Expect(err).To(HaveOccurred())
		g.Expect(out).To(ContainSubstring("deleting MachineSet demo-md-0-v1"))
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "plain", Name: "demo-md-0-v1"}, &clusterv1.MachineSet{})).To(Succeed())
	})
	t.Run("an in-place change goes through", func(t *testing.T) {
		g := NewWithT(t)
		out, err := apply("apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec: {version: v1.35.2}\n")
		g.Expect(err).NotTo(HaveOccurred(), out)
	})
	t.Run("files whose Secrets are over the budget are refused, naming the Secrets and the budget", func(t *testing.T) {
		g := NewWithT(t)
		for i := range 3 {
			g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: fmt.Sprintf("big-%d", i)},
				Data: map[string][]byte{"f": []byte(strings.Repeat("x", 1<<20))}})).To(Succeed())
		}
		kcp := func(secrets ...string) string {
			// The fixture's file stays: files is replaced as a whole.
			doc := "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec:\n  kubeadmConfigSpec:\n    files:\n" +
				"    - {path: /etc/motd, content: \"control plane\\n\"}\n"
			for i, sec := range secrets {
				doc += fmt.Sprintf("    - {path: /etc/big-%d, contentFrom: {secret: {name: %s, key: f}}}\n", i, sec)
			}
			return doc
		}
		// Each alone is in place: the planner covers files; together they are over
		// the budget, so the CanUpdate hooks would refuse and KCP replace.
		refused(t, "plain", kcp("big-0", "big-1", "big-2"),
			"KubeadmControlPlane plain/demo-cp", "demo-cp-0", "KubeadmControlPlane demo-cp kubeadmConfigSpec files and users",
			"hold more than 2097152 bytes (2 MiB), the budget of one in-place update", "(big-0, big-1)", "passed at Secret big-1")

		// A Secret that does not exist yet is not over the budget: admitted, with a
		// warning that CanUpdate counts it later.
		out, err := apply(kcp("big-0", "created-later"))
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("Warning: capi-inplace guard: KubeadmControlPlane/demo-cp references Secret(s) created-later, which do not exist yet"))
	})
	t.Run("the override lets one replacing change through, recorded in an Event, and only one", func(t *testing.T) {
		g := NewWithT(t)
		out, err := apply("apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain, annotations: {" +
			inplacev1.AllowReplaceAnnotation + ": CHG-1234}}\nspec: {kubeadmConfigSpec: {preKubeadmCommands: [echo hi]}}\n")
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Eventually(func() []string {
			list := &eventsv1.EventList{}
			g.Expect(admin.List(ctx, list, client.InNamespace("plain"))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == inplacev1.EventGuardOverridden && e.Regarding.Name == "demo-cp" {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}, 20*time.Second, 250*time.Millisecond).Should(ContainElement(And(ContainSubstring("CHG-1234"), ContainSubstring("demo-cp-0"))))
		// The stored value is spent: the next replacing change is refused again.
		refused(t, "plain", "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec: {kubeadmConfigSpec: {preKubeadmCommands: [echo hi, echo again]}}\n",
			"preKubeadmCommands")
	})
	t.Run("the Cluster annotation turns the guard off for that Cluster", func(t *testing.T) {
		g := NewWithT(t)
		out, err := kubectl("", "annotate", "cluster", "-n", "fleet", "demo", inplacev1.GuardAnnotation+"="+inplacev1.GuardDisabled)
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Eventually(func() error {
			out, err := apply("apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: fleet}\nspec: {topology: {version: v1.37.0}}\n")
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}, 20*time.Second, 250*time.Millisecond).Should(Succeed())
	})
	t.Run("a template the cache has not seen yet is read again without the cache before refusing", func(t *testing.T) {
		g := NewWithT(t)
		tmpl := &unstructured.Unstructured{}
		tmpl.SetGroupVersionKind(schema.GroupVersionKind{Group: previewtest.InfraGroup, Version: "v1beta2", Kind: "DevMachineTemplate"})
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "plain", Name: "demo-md-0-v1"}, tmpl)).To(Succeed())
		fresh := &unstructured.Unstructured{Object: map[string]any{"apiVersion": tmpl.GetAPIVersion(), "kind": tmpl.GetKind(), "spec": tmpl.Object["spec"]}}
		fresh.SetNamespace("plain")
		fresh.SetName("demo-md-0-v2")
		g.Expect(admin.Create(ctx, fresh)).To(Succeed())
		md := &clusterv1.MachineDeployment{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "plain", Name: "demo-md-0"}, md)).To(Succeed())
		written := md.DeepCopy()
		written.Spec.Template.Spec.InfrastructureRef.Name = "demo-md-0-v2"
		req := updateRequest(t, clusterv1.GroupVersion.WithKind("MachineDeployment"), "machinedeployments", md, written)
		// A reader that has not seen the new template, like a cache right after its creation.
		stale := hidingReader{Reader: admin, name: "demo-md-0-v2"}
		for _, tc := range []struct {
			live    client.Reader
			allowed bool
		}{{nil, false}, {admin, true}} {
			h, err := guard.NewHandler(guard.Options{Reader: stale, LiveReader: tc.live, Secrets: admin, Planner: pl, Policy: policy.Builtin(), Recorder: mgr.GetEventRecorder("test")})
			g.Expect(err).NotTo(HaveOccurred())
			resp := h.Handle(ctx, req)
			g.Expect(resp.Allowed).To(Equal(tc.allowed), "%+v", resp.Result)
		}
	})
	t.Run("disableInPlaceUpdates in the ExtensionConfig makes an in-place change a replacement", func(t *testing.T) {
		g := NewWithT(t)
		ec := &runtimev1.ExtensionConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace"},
			Spec: runtimev1.ExtensionConfigSpec{
				ClientConfig: runtimev1.ClientConfig{URL: "https://127.0.0.1:1"},
				Settings:     map[string]string{inplacev1.SettingDisableInPlaceUpdates: "true"},
			},
		}
		g.Expect(admin.Create(ctx, ec)).To(Succeed())
		// The guard reads it through the cache: wait until the cache has it.
		g.Eventually(func() error {
			return cached.Get(ctx, client.ObjectKey{Name: "capi-inplace"}, &runtimev1.ExtensionConfig{})
		}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
		refused(t, "plain", "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: plain}\nspec: {version: v1.35.3}\n",
			"disableInPlaceUpdates=true")
		g.Expect(admin.Delete(ctx, ec)).To(Succeed())
	})
	t.Run("ClusterClass: a topology variable is judged at the Cluster write by the derived desired state", func(t *testing.T) {
		g := NewWithT(t)
		// A ClusterClass whose files variable is patched into the control plane's
		// kubeadmConfigSpec, and a Cluster of it: set up before the namespace opts in.
		fx := previewtest.Default()
		fx.Namespace = "classy"
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace}})).To(Succeed())
		createFixture(ctx, t, admin, fx)
		for _, doc := range strings.Split(classDocs, "---\n") {
			u := &unstructured.Unstructured{}
			g.Expect(sigsyaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
			u.SetNamespace(fx.Namespace)
			g.Expect(admin.Create(ctx, u)).To(Succeed(), u.GetKind())
		}
		class := &clusterv1.ClusterClass{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: "in-place"}, class)).To(Succeed())
		// What Cluster API's ClusterClass controller reports: the variable's definition.
		class.Status.Variables = []clusterv1.ClusterClassStatusVariable{{Name: "files", Definitions: []clusterv1.ClusterClassStatusVariableDefinition{{
			From: clusterv1.VariableDefinitionFromInline, Required: ptr.To(true), Schema: class.Spec.Variables[0].Schema,
		}}}}
		g.Expect(admin.Status().Update(ctx, class)).To(Succeed())
		cluster := &clusterv1.Cluster{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.Cluster}, cluster)).To(Succeed())
		cluster.Spec.Topology.Variables = []clusterv1.ClusterVariable{{Name: "files", Value: apiextensionsv1.JSON{Raw: []byte(`[{"path":"/etc/motd","content":"control plane\n"}]`)}}}
		g.Expect(admin.Update(ctx, cluster)).To(Succeed())
		md := &clusterv1.MachineDeployment{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.MDName()}, md)).To(Succeed())
		md.Labels[clusterv1.ClusterTopologyMachineDeploymentNameLabel] = "md-0"
		g.Expect(admin.Update(ctx, md)).To(Succeed())
		ns := &corev1.Namespace{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: fx.Namespace}, ns)).To(Succeed())
		ns.Labels = map[string]string{inplacev1.NamespaceEnabledLabel: "true"}
		g.Expect(admin.Update(ctx, ns)).To(Succeed())

		variable := func(files string) string {
			return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: classy}\n" +
				"spec: {topology: {variables: [{name: files, value: " + files + "}]}}\n"
		}
		// The file moves to another path: the ClusterClass patch puts it into the
		// KubeadmControlPlane, and /etc/motd would have to be removed from the nodes.
		refused(t, "classy", variable(`[{path: /etc/issue, content: "control plane\n"}]`),
			"Cluster classy/demo", "files /etc/motd are removed", "demo-cp-0")
		// Its content changes: the agent writes it in place.
		out, err := apply(variable(`[{path: /etc/motd, content: "new\n"}]`))
		g.Expect(err).NotTo(HaveOccurred(), out)
	})
	// classCluster creates namespace ns with previewtest's cluster of the ClusterClass
	// classDocs (adjusted by editClass), its files variable set, then opts ns in.
	classCluster := func(t *testing.T, ns string, editClass func(*clusterv1.ClusterClass)) {
		t.Helper()
		g := NewWithT(t)
		fx := previewtest.Default()
		fx.Namespace = ns
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace}})).To(Succeed())
		createFixture(ctx, t, admin, fx)
		for _, doc := range strings.Split(classDocs, "---\n") {
			u := &unstructured.Unstructured{}
			g.Expect(sigsyaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
			u.SetNamespace(fx.Namespace)
			g.Expect(admin.Create(ctx, u)).To(Succeed(), u.GetKind())
		}
		class := &clusterv1.ClusterClass{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: "in-place"}, class)).To(Succeed())
		if editClass != nil {
			editClass(class)
			g.Expect(admin.Update(ctx, class)).To(Succeed())
		}
		class.Status.Variables = []clusterv1.ClusterClassStatusVariable{{Name: "files", Definitions: []clusterv1.ClusterClassStatusVariableDefinition{{
			From: clusterv1.VariableDefinitionFromInline, Required: ptr.To(true), Schema: class.Spec.Variables[0].Schema,
		}}}}
		g.Expect(admin.Status().Update(ctx, class)).To(Succeed())
		cluster := &clusterv1.Cluster{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.Cluster}, cluster)).To(Succeed())
		cluster.Spec.Topology.Variables = []clusterv1.ClusterVariable{{Name: "files", Value: apiextensionsv1.JSON{Raw: []byte(`[{"path":"/etc/motd","content":"control plane\n"}]`)}}}
		g.Expect(admin.Update(ctx, cluster)).To(Succeed())
		md := &clusterv1.MachineDeployment{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.MDName()}, md)).To(Succeed())
		md.Labels[clusterv1.ClusterTopologyMachineDeploymentNameLabel] = "md-0"
		g.Expect(admin.Update(ctx, md)).To(Succeed())
		nsObj := &corev1.Namespace{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: fx.Namespace}, nsObj)).To(Succeed())
		nsObj.Labels = map[string]string{inplacev1.NamespaceEnabledLabel: "true"}
		g.Expect(admin.Update(ctx, nsObj)).To(Succeed())
		// The guard reads through the cache: wait until it holds what was just written.
		g.Eventually(func(g Gomega) {
			c, m, cc := &clusterv1.ClusterClass{}, &clusterv1.MachineDeployment{}, &clusterv1.Cluster{}
			g.Expect(cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: "in-place"}, c)).To(Succeed())
			g.Expect(c.Status.Variables).NotTo(BeEmpty())
			g.Expect(cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: fx.MDName()}, m)).To(Succeed())
			g.Expect(m.Labels).To(HaveKey(clusterv1.ClusterTopologyMachineDeploymentNameLabel))
			g.Expect(cached.Get(ctx, client.ObjectKey{Namespace: ns, Name: fx.Cluster}, cc)).To(Succeed())
			g.Expect(cc.Spec.Topology.Variables).NotTo(BeEmpty())
		}, 20*time.Second, 100*time.Millisecond).Should(Succeed())
	}
	t.Run("ClusterClass: a chained upgrade through our GenerateUpgradePlan hook is judged by its first step", func(t *testing.T) {
		g := NewWithT(t)
		classCluster(t, "chained", func(c *clusterv1.ClusterClass) {
			c.Spec.KubernetesVersions = []string{"v1.35.0", "v1.36.0", "v1.36.2", "v1.37.0", "v1.38.0"}
			c.Spec.Upgrade.External.GenerateUpgradePlanExtension = "generate-upgrade-plan.capi-inplace"
		})
		write := func(version, files string) string {
			return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: chained}\n" +
				"spec: {topology: {version: " + version + ", variables: [{name: files, value: " + files + "}]}}\n"
		}
		// v1.35.0 -> v1.38.0: Cluster API first writes the control plane at v1.36.2 (the
		// hook's first step; the workers wait), which is in place. The old guard moved
		// every Machine to v1.38.0 and refused three minors.
		before := resourceVersions(ctx, t, admin, "chained")
		out, err := apply(write("v1.38.0", `[{path: /etc/motd, content: "control plane\n"}]`))
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Expect(out).NotTo(ContainSubstring("Warning"), "the desired state was computed, not judged by the version alone")
		// The derived writes are the topology controller's, which this test does not
		// run: only the Cluster changed.
		after := resourceVersions(ctx, t, admin, "chained")
		for k, rv := range before {
			if !strings.HasPrefix(k, "Cluster/") {
				g.Expect(after[k]).To(Equal(rv), k)
			}
		}
		// A genuinely replacing change in the same setup is still refused: the file
		// moves to another path on the control plane, which is mid-chain (Cluster at
		// v1.38.0, control plane at v1.35.0).
		refused(t, "chained", write("v1.38.0", `[{path: /etc/issue, content: "control plane\n"}]`),
			"Cluster chained/demo", "files /etc/motd are removed", "demo-cp-0")
	})
	t.Run("ClusterClass: a topology write judged by its version alone says so in a warning", func(t *testing.T) {
		g := NewWithT(t)
		// Another extension's upgrade plan: only Cluster API's RuntimeSDK can ask it.
		classCluster(t, "external", func(c *clusterv1.ClusterClass) {
			c.Spec.KubernetesVersions = []string{"v1.35.0", "v1.35.1"}
			c.Spec.Upgrade.External.GenerateUpgradePlanExtension = "plan.someone-else"
		})
		var out string
		g.Eventually(func() string {
			out, _ = apply("apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: external}\nspec: {topology: {version: v1.35.1}}\n")
			return out
		}, 20*time.Second, 250*time.Millisecond).Should(ContainSubstring("Warning: capi-inplace guard"))
		g.Expect(out).To(ContainSubstring(`names the GenerateUpgradePlan extension "plan.someone-else"`))
		g.Expect(out).To(ContainSubstring("planned by its topology version alone"))
		cluster := &clusterv1.Cluster{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "external", Name: "demo"}, cluster)).To(Succeed())
		g.Expect(cluster.Spec.Topology.Version).To(Equal("v1.35.1"), "an in-place change judged by its version goes through")
	})
	t.Run("a Cluster's allow-replace admits one change: its write and its derived writes until reconciled", func(t *testing.T) {
		g := NewWithT(t)
		classCluster(t, "override", nil)
		write := func(annotation, files string) string {
			ann := ""
			if annotation != "" {
				ann = ", annotations: {" + inplacev1.AllowReplaceAnnotation + ": " + annotation + "}"
			}
			return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: override" + ann + "}\n" +
				"spec: {topology: {variables: [{name: files, value: " + files + "}]}}\n"
		}
		// The replacing change with a new value goes through, recorded with the user.
		out, err := apply(write("CHG-1", `[{path: /etc/issue, content: "control plane\n"}]`))
		g.Expect(err).NotTo(HaveOccurred(), out)
		g.Eventually(func() []string {
			list := &eventsv1.EventList{}
			g.Expect(admin.List(ctx, list, client.InNamespace("override"))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == inplacev1.EventGuardOverridden && e.Regarding.Kind == "Cluster" {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}, 20*time.Second, 250*time.Millisecond).Should(ContainElement(And(ContainSubstring(`"CHG-1"`), ContainSubstring("by operator"), ContainSubstring("demo-cp-0"))))

		// A derived write (the topology controller's MachineDeployment) is admitted by
		// the Cluster's value until the topology it was set with is reconciled.
		h, err := guard.NewHandler(guard.Options{Reader: admin, Secrets: admin, Planner: pl, Policy: policy.Builtin(), Recorder: mgr.GetEventRecorder("test")})
		g.Expect(err).NotTo(HaveOccurred())
		fx := previewtest.Default()
		md := &clusterv1.MachineDeployment{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "override", Name: fx.MDName()}, md)).To(Succeed())
		replacing := md.DeepCopy()
		replacing.Spec.Template.Spec.Version = "v1.37.0"
		req := updateRequest(t, clusterv1.GroupVersion.WithKind("MachineDeployment"), "machinedeployments", md, replacing)
		resp := h.Handle(ctx, req)
		g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
		cluster := &clusterv1.Cluster{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: "override", Name: "demo"}, cluster)).To(Succeed())
		cluster.Status.Conditions = []metav1.Condition{{
			Type: clusterv1.ClusterTopologyReconciledCondition, Status: metav1.ConditionTrue, Reason: "ReconcileSucceeded",
			ObservedGeneration: cluster.Generation, LastTransitionTime: metav1.Now(),
		}}
		g.Expect(admin.Status().Update(ctx, cluster)).To(Succeed())
		resp = h.Handle(ctx, req)
		g.Expect(resp.Allowed).To(BeFalse(), "the value is spent once its topology is reconciled")
		g.Expect(resp.Result.Message).To(ContainSubstring("skips a minor"))

		// A later topology change that keeps the value is refused until it removes it
		// (back to the file the KubeadmControlPlane holds: in place).
		back := `[{path: /etc/motd, content: "control plane\n"}]`
		out, err = apply(write("CHG-1", back))
		g.Expect(err).To(HaveOccurred(), out)
		g.Expect(out).To(ContainSubstring("keeps annotation " + inplacev1.AllowReplaceAnnotation + `="CHG-1"`))
		out, err = kubectl("", "annotate", "cluster", "-n", "override", "demo", inplacev1.AllowReplaceAnnotation+"-")
		g.Expect(err).NotTo(HaveOccurred(), out)
		out, err = apply(write("", back))
		g.Expect(err).NotTo(HaveOccurred(), out)
	})
	// The admission port is open to every pod: a request sent there directly, with a
	// namespace and a user of the sender's choosing, is not the API server's (review F13).
	direct := func(g Gomega, ns, preKubeadm, override string) admission.Request {
		kcp := &controlplanev1.KubeadmControlPlane{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-cp"}, kcp)).To(Succeed())
		written := kcp.DeepCopy()
		written.Spec.KubeadmConfigSpec.PreKubeadmCommands = []string{preKubeadm}
		if override != "" {
			written.Annotations = map[string]string{inplacev1.AllowReplaceAnnotation: override}
		}
		req := updateRequest(t, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"), "kubeadmcontrolplanes", kcp, written)
		req.UserInfo.Username = "alice"
		return req
	}
	t.Run("a direct request about a namespace not opted in plans nothing and learns nothing", func(t *testing.T) {
		g := NewWithT(t)
		h, err := guard.NewHandler(guard.Options{Reader: admin, Secrets: admin, Planner: pl, Policy: policy.Builtin(), Recorder: mgr.GetEventRecorder("test")})
		g.Expect(err).NotTo(HaveOccurred())
		resp := h.Handle(ctx, direct(g, "other", "echo replaced", ""))
		g.Expect(resp.Allowed).To(BeTrue(), "%+v", resp.Result)
		g.Expect(resp.Result.Message).To(BeEmpty(), "no Machine, version or path of that namespace")
		// The same change in an opted-in namespace is refused, naming the Machine.
		resp = h.Handle(ctx, direct(g, "plain", "echo replaced", ""))
		g.Expect(resp.Allowed).To(BeFalse())
		g.Expect(resp.Result.Message).To(ContainSubstring("demo-cp-0"))
	})
	t.Run("a direct request records no override Event for a write that never happened", func(t *testing.T) {
		g := NewWithT(t)
		h, err := guard.NewHandler(guard.Options{Reader: admin, Secrets: admin, Planner: pl, Policy: policy.Builtin(), Recorder: mgr.GetEventRecorder("test")})
		g.Expect(err).NotTo(HaveOccurred())
		resp := h.Handle(ctx, direct(g, "plain", "echo forged", "FORGED-1"))
		g.Expect(resp.Allowed).To(BeTrue(), "the override admits it: %+v", resp.Result)
		g.Consistently(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(admin.List(ctx, list, client.InNamespace("plain"))).To(Succeed())
			for _, e := range list.Items {
				g.Expect(e.Note).NotTo(ContainSubstring("FORGED-1"), "an Event claiming alice wrote it")
			}
		}, 5*time.Second, 250*time.Millisecond).Should(Succeed())
	})
	t.Run("refusals are counted by reason", func(t *testing.T) {
		g := NewWithT(t)
		counts := refusalCounts(t, reg)
		for _, reason := range []string{"field", "rollout", "missing-object", "unhealthy-control-plane", "secret-budget"} {
			g.Expect(counts).To(HaveKeyWithValue(reason, BeNumerically(">=", 1)), reason)
		}
	})
}

// refusalCounts reads capi_inplace_guard_refusals_total by reason.
func refusalCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "capi_inplace_guard_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			out[labelValue(m, "reason")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// createFixture creates the fixture's objects as their owners would, then writes the
// Machines' status (nodeRef) through the status subresource.
func createFixture(ctx context.Context, t *testing.T, c client.Client, fx previewtest.Options) {
	t.Helper()
	objs, err := fx.Objects()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		obj.SetUID("")
		var status *clusterv1.MachineStatus
		if m, ok := obj.(*clusterv1.Machine); ok {
			status = m.Status.DeepCopy()
		}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
		if status != nil {
			m := obj.(*clusterv1.Machine)
			m.Status = *status
			if err := c.Status().Update(ctx, m); err != nil {
				t.Fatalf("write status of Machine %s: %v", m.Name, err)
			}
		}
	}
	// Owner references point at the real UIDs, as the controllers set them.
	ms := &clusterv1.MachineSet{}
	md := &clusterv1.MachineDeployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.MSName()}, ms); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: fx.MDName()}, md); err != nil {
		t.Fatal(err)
	}
	ms.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(md, clusterv1.GroupVersion.WithKind("MachineDeployment"))}
	if err := c.Update(ctx, ms); err != nil {
		t.Fatal(err)
	}
}

// resourceVersions returns "<kind>/<name>" -> resourceVersion for every object of the
// fixture's kinds in namespace.
func resourceVersions(ctx context.Context, t *testing.T, c client.Client, namespace string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvk := range []schema.GroupVersionKind{
		clusterv1.GroupVersion.WithKind("ClusterList"), clusterv1.GroupVersion.WithKind("MachineDeploymentList"),
		clusterv1.GroupVersion.WithKind("MachineSetList"), clusterv1.GroupVersion.WithKind("MachineList"),
		controlplanev1.GroupVersion.WithKind("KubeadmControlPlaneList"),
		bootstrapv1.GroupVersion.WithKind("KubeadmConfigList"), bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplateList"),
		{Group: previewtest.InfraGroup, Version: "v1beta2", Kind: "DevMachineList"},
		{Group: previewtest.InfraGroup, Version: "v1beta2", Kind: "DevMachineTemplateList"},
	} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			t.Fatalf("list %s: %v", gvk.Kind, err)
		}
		for _, item := range list.Items {
			out[item.GetKind()+"/"+item.GetName()] = item.GetResourceVersion()
		}
	}
	if len(out) < 20 {
		t.Fatalf("expected the fixture's objects, found %d", len(out))
	}
	return out
}

// hidingReader answers NotFound for one object name.
type hidingReader struct {
	client.Reader
	name string
}

func (r hidingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key.Name == r.name {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "hidden"}, key.Name)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// updateRequest is the admission request of an update of old to written.
func updateRequest(t *testing.T, gvk schema.GroupVersionKind, resource string, old, written client.Object) admission.Request {
	t.Helper()
	encode := func(o client.Object) []byte {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: u}
		obj.SetGroupVersionKind(gvk)
		b, err := obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "test", Kind: metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
		Resource:  metav1.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: resource},
		Namespace: old.GetNamespace(), Name: old.GetName(), Operation: admissionv1.Update,
		Object: runtime.RawExtension{Raw: encode(written)}, OldObject: runtime.RawExtension{Raw: encode(old)},
	}}
}

// classDocs is a ClusterClass for previewtest's cluster (class in-place): its
// templates hold what the fixture's KubeadmControlPlane, MachineDeployment and
// templates hold, and its files variable is patched into the control plane's
// kubeadmConfigSpec.files.
const classDocs = `apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevClusterTemplate
metadata: {name: in-place-cluster}
spec: {template: {spec: {backend: {inMemory: {}}}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata: {name: in-place-cp}
spec:
  template:
    spec:
      rollout: {strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0}}}
      kubeadmConfigSpec:
        clusterConfiguration: {apiServer: {certSANs: [localhost, 127.0.0.1]}}
        initConfiguration: {nodeRegistration: {kubeletExtraArgs: [{name: eviction-hard, value: "nodefs.available<0%"}]}}
        joinConfiguration: {nodeRegistration: {kubeletExtraArgs: [{name: eviction-hard, value: "nodefs.available<0%"}]}}
        files: [{path: /etc/motd, content: "replaced by the files variable"}]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata: {name: in-place-cp}
spec: {template: {spec: {backend: {inMemory: {}}}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata: {name: in-place-worker}
spec: {template: {spec: {backend: {docker: {customImage: "registry.example/node-os:1.0"}}}}}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: in-place-worker}
spec:
  template:
    spec:
      joinConfiguration: {nodeRegistration: {kubeletExtraArgs: [{name: eviction-hard, value: "nodefs.available<0%"}]}}
      files: [{path: /etc/motd, content: "worker\n"}]
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata: {name: in-place}
spec:
  infrastructure: {templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: DevClusterTemplate, name: in-place-cluster}}
  controlPlane:
    templateRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, name: in-place-cp}
    machineInfrastructure: {templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: DevMachineTemplate, name: in-place-cp}}
  workers:
    machineDeployments:
    - class: default-worker
      bootstrap: {templateRef: {apiVersion: bootstrap.cluster.x-k8s.io/v1beta2, kind: KubeadmConfigTemplate, name: in-place-worker}}
      infrastructure: {templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: DevMachineTemplate, name: in-place-worker}}
  variables:
  - name: files
    required: true
    schema:
      openAPIV3Schema:
        type: array
        items: {type: object, required: [path, content], properties: {path: {type: string}, content: {type: string}}}
  patches:
  - name: files
    definitions:
    - selector: {apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, matchResources: {controlPlane: true}}
      jsonPatches: [{op: replace, path: /spec/template/spec/kubeadmConfigSpec/files, valueFrom: {variable: files}}]
`
