package clusterctl_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/capi-inplace/capi-inplace/hack/release"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

const (
	namespace = "capi-inplace-system"
	// The two local releases: the upgrade changes the images' default tags.
	fromVersion = "v0.1.0"
	toVersion   = "v0.1.1"
	// agentImage is set as a clusterctl variable at init: an operator's mirror, by digest.
	agentImage = "registry.example/mirror/capi-inplace-agent@sha256:4b1e5ad4d7a3e0b6b1d3c2f7a8e9d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5f6e7"
)

// TestClusterctlRoundTrip installs capi-inplace with `clusterctl init
// --runtime-extension capi-inplace` from a local repository holding our release
// artifacts, upgrades it to the next local release with `clusterctl upgrade apply`
// and deletes it with `clusterctl delete`, asserting after each step the objects on a
// real kube-apiserver.
func TestClusterctlRoundTrip(t *testing.T) {
	clusterctl, kubectl := requireTools(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	from, err := release.Build(release.Options{ConfigDir: "../../config", Version: fromVersion})
	g.Expect(err).NotTo(HaveOccurred())
	to, err := release.Build(release.Options{ConfigDir: "../../config", Version: toVersion})
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	repo := newLocalRepository(t, filepath.Join(dir, "repository"), from, to)

	te := testenv.StartT(t, testenv.Options{})
	cfg := te.Config
	admin, err := te.Environment.AddUser(envtest.User{Name: "clusterctl", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := admin.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfigPath, kubeconfig)

	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(clusterctlv1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	run := newRunner(t, clusterctl, repo, kubeconfigPath, dir)
	ours := objects(t, from.Components)

	// init: cert-manager, the Cluster API providers and capi-inplace, all from the
	// local repository.
	run(ctx, "init",
		"--core", "cluster-api:"+capiVersion,
		"--bootstrap", "kubeadm:"+capiVersion,
		"--control-plane", "kubeadm:"+capiVersion,
		"--runtime-extension", release.ProviderName+":"+fromVersion)

	t.Run("init installs every object of the components, labelled as the provider's", func(t *testing.T) {
		g := NewWithT(t)
		for _, o := range ours {
			got := get(ctx, t, c, o)
			g.Expect(got).NotTo(BeNil(), "%s %s/%s after init", o.GetKind(), o.GetNamespace(), o.GetName())
			if got != nil {
				g.Expect(got.GetLabels()).To(HaveKeyWithValue(clusterctlv1.ClusterctlLabel, ""), "%s %s", o.GetKind(), o.GetName())
				g.Expect(got.GetLabels()).To(HaveKeyWithValue("cluster.x-k8s.io/provider", release.ProviderLabel), "%s %s", o.GetKind(), o.GetName())
			}
		}
		g.Expect(kinds(ours)).To(ContainElements("Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
			"Role", "RoleBinding", "ExtensionConfig", "Issuer", "Certificate", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"))
	})

	t.Run("init substitutes the variables: defaults, and the agent image set in the environment", func(t *testing.T) {
		g := NewWithT(t)
		image, agent := deploymentImages(ctx, t, c)
		g.Expect(image).To(Equal(release.DefaultRegistry + "/capi-inplace:" + fromVersion))
		g.Expect(agent).To(Equal(agentImage))
		ec := getNamed(ctx, t, c, "runtime.cluster.x-k8s.io/v1beta2", "ExtensionConfig", "", "capi-inplace")
		settings, _, _ := unstructured.NestedStringMap(ec.Object, "spec", "settings")
		g.Expect(settings).To(Equal(map[string]string{"disableInPlaceUpdates": "false"}))
		g.Expect(ec.GetAnnotations()).To(HaveKeyWithValue("runtime.cluster.x-k8s.io/inject-ca-from-secret", namespace+"/capi-inplace-webhook-service-cert"))
		svc, _, _ := unstructured.NestedMap(ec.Object, "spec", "clientConfig", "service")
		g.Expect(svc).To(Equal(map[string]any{"namespace": namespace, "name": "capi-inplace-webhook-service", "port": int64(443)}))
	})

	t.Run("the cert-manager wiring: Issuer, Certificate for the Service, CA injection", func(t *testing.T) {
		g := NewWithT(t)
		cert := getNamed(ctx, t, c, "cert-manager.io/v1", "Certificate", namespace, "capi-inplace-serving-cert")
		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		g.Expect(dnsNames).To(ConsistOf("capi-inplace-webhook-service."+namespace+".svc", "capi-inplace-webhook-service."+namespace+".svc.cluster.local"))
		issuerRef, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
		g.Expect(issuerRef).To(Equal(map[string]string{"kind": "Issuer", "name": "capi-inplace-selfsigned-issuer"}))
		g.Expect(getNamed(ctx, t, c, "cert-manager.io/v1", "Issuer", namespace, "capi-inplace-selfsigned-issuer")).NotTo(BeNil())
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
			for _, o := range ours {
				if o.GetKind() == kind {
					got := get(ctx, t, c, o)
					g.Expect(got.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", namespace+"/capi-inplace-serving-cert"), o.GetName())
				}
			}
		}
		// clusterctl installed cert-manager (its CRDs) from the configured URL.
		crd := &apiextensionsv1.CustomResourceDefinition{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "certificates.cert-manager.io"}, crd)).To(Succeed())
		g.Expect(crd.Labels).To(HaveKeyWithValue(clusterctlv1.ClusterctlCoreLabel, clusterctlv1.ClusterctlCoreLabelCertManagerValue))
		g.Expect(crd.Annotations).To(HaveKeyWithValue(clusterctlv1.CertManagerVersionAnnotation, certManagerVersion))
	})

	t.Run("the inventory records the RuntimeExtensionProvider", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(inventory(ctx, t, c)).To(And(
			HaveKeyWithValue(namespace+"/"+release.ProviderLabel, string(clusterctlv1.RuntimeExtensionProviderType)+" "+fromVersion),
			HaveKeyWithValue("capi-system/cluster-api", string(clusterctlv1.CoreProviderType)+" "+capiVersion),
		))
	})

	// upgrade: the next release, whose images default to its own tag.
	plan := run(ctx, "upgrade", "plan")
	g.Expect(plan).To(MatchRegexp(`(?m)^`+release.ProviderLabel+`\s+`+namespace+`\s+RuntimeExtensionProvider\s+`+fromVersion+`\s+`+toVersion), "upgrade plan offers %s", toVersion)
	run(ctx, "upgrade", "apply", "--runtime-extension", namespace+"/"+release.ProviderName+":"+toVersion)

	t.Run("upgrade apply moves to the next release", func(t *testing.T) {
		g := NewWithT(t)
		image, agent := deploymentImages(ctx, t, c)
		g.Expect(image).To(Equal(release.DefaultRegistry + "/capi-inplace:" + toVersion))
		g.Expect(agent).To(Equal(agentImage), "the variable still set at upgrade")
		g.Expect(inventory(ctx, t, c)).To(HaveKeyWithValue(namespace+"/"+release.ProviderLabel, string(clusterctlv1.RuntimeExtensionProviderType)+" "+toVersion))
		for _, o := range objects(t, to.Components) {
			g.Expect(get(ctx, t, c, o)).NotTo(BeNil(), "%s %s/%s after upgrade", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	})

	// delete: every object of ours goes but the namespace (clusterctl keeps it unless
	// --include-namespace), our CRDs (unless --include-crd) and the ExtensionConfig; the Cluster API providers and
	// cert-manager stay.
	run(ctx, "delete", "--runtime-extension", release.ProviderName)

	t.Run("delete removes the provider but its ExtensionConfig, and nothing else", func(t *testing.T) {
		g := NewWithT(t)
		for _, o := range objects(t, to.Components) {
			switch o.GetKind() {
			case "Namespace":
				continue
			case "CustomResourceDefinition":
				// clusterctl keeps a provider's CRDs (and so its users' objects) unless
				// --include-crd.
				g.Expect(get(ctx, t, c, o)).NotTo(BeNil(), "clusterctl delete keeps %s without --include-crd", o.GetName())
				continue
			case "ExtensionConfig":
				// clusterctl never lists objects whose kind is another provider's CRD
				// (ListResources in cmd/clusterctl/client/cluster/proxy.go), and
				// ExtensionConfig is Cluster API core's: it stays behind, so that
				// docs/install.md's removal is clusterctl delete plus kubectl delete. If a
				// later clusterctl deletes it, this fails: drop the second command then.
				g.Expect(get(ctx, t, c, o)).NotTo(BeNil(), "clusterctl delete leaves the ExtensionConfig (docs/install.md)")
				continue
			}
			g.Eventually(func() *unstructured.Unstructured { return get(ctx, t, c, o) }).WithTimeout(30*time.Second).
				Should(BeNil(), "%s %s/%s after delete", o.GetKind(), o.GetNamespace(), o.GetName())
		}
		inv := inventory(ctx, t, c)
		g.Expect(inv).NotTo(HaveKey(namespace + "/" + release.ProviderLabel))
		g.Expect(inv).To(HaveLen(3), "core, bootstrap and control plane remain: %v", inv)
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "capi-system", Name: "capi-controller-manager"}, &appsv1.Deployment{})).To(Succeed())

		// docs/install.md's second command.
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfigPath, "delete", "extensionconfig", "capi-inplace").CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "kubectl delete extensionconfig: %s", out)
		g.Expect(get(ctx, t, c, find(t, objects(t, to.Components), "ExtensionConfig", "capi-inplace"))).To(BeNil())
	})
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the components have no %s %s", kind, name)
	return nil
}

// newRunner returns a function running clusterctl with the local repository's
// configuration and an environment of its own (no user configuration, no network),
// failing the test with clusterctl's output when it fails.
func newRunner(t *testing.T, clusterctl string, repo localRepository, kubeconfig, home string) func(ctx context.Context, args ...string) string {
	env := []string{
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"PATH=" + os.Getenv("PATH"),
		"CLUSTERCTL_DISABLE_VERSIONCHECK=true",
		// What an operator sets for capi-inplace (docs/install.md).
		"EXP_RUNTIME_SDK=true",
		"EXP_IN_PLACE_UPDATES=true",
		release.VarAgentImage + "=" + agentImage,
	}
	return func(ctx context.Context, args ...string) string {
		t.Helper()
		args = append(args, "--config", repo.configPath, "--kubeconfig", kubeconfig, "-v", "2")
		cmd := exec.CommandContext(ctx, clusterctl, args...)
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("clusterctl %s: %s", strings.Join(args[:2], " "), time.Since(start).Round(100*time.Millisecond))
		if err != nil {
			t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
}

// objects decodes a components file, variables left as they are.
func objects(t *testing.T, components []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(components), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("decode components: %v", err)
		}
		objs = append(objs, u)
	}
	return objs
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind())
	}
	return out
}

// get reads the object o names from the API server; nil when it does not exist.
func get(ctx context.Context, t *testing.T, c client.Client, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, got)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
	return got
}

func getNamed(ctx context.Context, t *testing.T, c client.Client, apiVersion, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(apiVersion)
	o.SetKind(kind)
	o.SetNamespace(ns)
	o.SetName(name)
	got := get(ctx, t, c, o)
	if got == nil {
		t.Fatalf("%s %s/%s does not exist", kind, ns, name)
	}
	return got
}

// deploymentImages returns the extension's image and its AGENT_IMAGE.
func deploymentImages(ctx context.Context, t *testing.T, c client.Client) (image, agent string) {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "capi-inplace-extension"}, dep); err != nil {
		t.Fatalf("get the extension's Deployment: %v", err)
	}
	for _, ct := range dep.Spec.Template.Spec.Containers {
		if ct.Name != "extension" {
			continue
		}
		image = ct.Image
		for _, e := range ct.Env {
			if e.Name == "AGENT_IMAGE" {
				agent = e.Value
			}
		}
	}
	return image, agent
}

// inventory is clusterctl's provider inventory: namespace/name -> "type version".
func inventory(ctx context.Context, t *testing.T, c client.Client) map[string]string {
	t.Helper()
	list := &clusterctlv1.ProviderList{}
	if err := c.List(ctx, list); err != nil {
		t.Fatalf("list clusterctl providers: %v", err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		out[p.Namespace+"/"+p.Name] = p.Type + " " + p.Version
	}
	return out
}

// requireTools returns bin/clusterctl's and bin/kubectl's paths. Without them or
// envtest's binaries the test fails in CI and is skipped elsewhere (`make test` builds
// them).
func requireTools(t *testing.T) (clusterctl, kubectl string) {
	t.Helper()
	missing := func(what string) { testenv.Unavailable(t, "%s: `make test` builds it", what) }
	testenv.RequireAssets(t)
	bin, err := filepath.Abs("../../bin")
	if err != nil {
		t.Fatal(err)
	}
	clusterctl, kubectl = filepath.Join(bin, "clusterctl"), filepath.Join(bin, "kubectl")
	if _, err := os.Stat(clusterctl); err != nil {
		missing("bin/clusterctl is missing (hack/tools/build.sh clusterctl)")
	}
	if _, err := os.Stat(kubectl); err != nil {
		missing("bin/kubectl is missing (hack/tools/build.sh k8s)")
	}
	// bin/ is built only when missing: a clusterctl left from an older pin must not pass
	// for this one.
	out, err := exec.Command(clusterctl, "version", "-o", "short").Output()
	if err != nil {
		t.Fatalf("clusterctl version: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != capiVersion {
		t.Fatalf("bin/clusterctl is %s, want %s: remove it and run make tools-clusterctl", got, capiVersion)
	}
	return clusterctl, kubectl
}

// TestClusterctlPinsAgree keeps the one Cluster API version in step: go.mod's (the
// contract hack/release checks and the providers the round trip installs), the
// clusterctl tool module's and the version stamped into bin/clusterctl.
func TestClusterctlPinsAgree(t *testing.T) {
	g := NewWithT(t)
	for path, re := range map[string]string{
		"../../go.mod":                           `(?m)^(?:require)?\s*sigs\.k8s\.io/cluster-api (v\S+)`,
		"../../hack/tools/clusterctl/go.mod":     `(?m)^(?:require)?\s*sigs\.k8s\.io/cluster-api (v\S+)`,
		"../../hack/tools/clusterctl/go.mod#api": `(?m)^\s*sigs\.k8s\.io/cluster-api/api (v\S+)`,
		"../../hack/tools/build.sh":              `(?m)^capi_version=(v\S+)$`,
	} {
		data, err := os.ReadFile(strings.TrimSuffix(path, "#api"))
		g.Expect(err).NotTo(HaveOccurred())
		m := regexp.MustCompile(re).FindSubmatch(data)
		g.Expect(m).NotTo(BeNil(), "%s: no Cluster API version", path)
		if m != nil {
			g.Expect(string(m[1])).To(Equal(capiVersion), path)
		}
	}
}
