package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestPlanCommand runs `capi-inplace plan` in-process against a real kube-apiserver
// holding Cluster API's CRDs (core, KCP, kubeadm bootstrap, the Dev provider) and a
// ClusterClass cluster: 3 control-plane Machines (KCP maxSurge 0), 2 workers
// (MachineDeployment maxUnavailable 1), their KubeadmConfigs, DevMachines and
// templates. Every write through the command's client fails the test, and no
// object's resourceVersion may move.
func TestPlanCommand(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	te := testenv.StartT(t, testenv.Options{
		CAPI:           []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane, testenv.KubeadmBootstrap, testenv.DockerInfra},
		ContractLabels: true,
	})
	env, cfg := te.Environment, te.Config
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme} {
		g.Expect(add(scheme)).To(Succeed())
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, env.KubeConfig, 0o600)).To(Succeed())

	fx := previewtest.Default()
	g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace}})).To(Succeed())
	createFixture(ctx, t, admin, fx)
	before := resourceVersions(ctx, t, admin, fx.Namespace)

	guard := &writeGuard{}
	readOnly := guard.newClient

	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
		return p
	}
	topology := func(v string) string {
		return "apiVersion: cluster.x-k8s.io/v1beta2\nkind: Cluster\nmetadata: {name: demo, namespace: fleet}\nspec: {topology: {version: " + v + "}}\n"
	}
	minor := file("minor.yaml", topology("v1.36.0"))
	twoMinors := file("two-minors.yaml", topology("v1.37.0"))
	kcpOnly := file("kcp.yaml", "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: demo-cp, namespace: fleet}\nspec: {version: v1.35.2}\n")
	files := file("files.yaml", `apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: demo-md-0-v2, namespace: fleet}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs: [{name: eviction-hard, value: "nodefs.available<0%"}]
      files:
      - {path: /etc/motd, content: "worker\n"}
      - {path: /etc/sysctl.d/90-inplace.conf, content: "vm.swappiness=10\n"}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: demo-md-0, namespace: fleet}
spec:
  template:
    spec:
      bootstrap:
        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: demo-md-0-v2}
`)

	policyFile := file("policy.yaml", `backends: {default: rauc}
artifacts:
- image: registry.example/node-os:2.0
  ref: https://artifacts.example/node-os-2.0.raucb
  digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
`)
	osImage := file("os-image.yaml", `apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: DevMachineTemplate
metadata: {name: demo-md-0-v2, namespace: fleet}
spec: {template: {spec: {backend: {docker: {customImage: "registry.example/node-os:2.0"}}}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineDeployment
metadata: {name: demo-md-0, namespace: fleet}
spec: {template: {spec: {infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: DevMachineTemplate, name: demo-md-0-v2}}}}
`)

	var stdin string
	run := func(args ...string) (string, error) {
		return runPlan(ctx, readOnly, stdin, append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
	}
	cp := []string{"demo-cp-0", "demo-cp-1", "demo-cp-2"}
	workers := []string{"demo-md-0-v1-0", "demo-md-0-v1-1"}

	t.Run("no change: every machine unchanged, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HavePrefix("CLUSTER fleet/demo\nMACHINE "))
		for _, m := range append(cp, workers...) {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 unchanged - - -"))
		}
		g.Expect(out).To(HaveSuffix("\n5 machines: 0 in place, 0 replaced, 5 unchanged.\n"))
	})

	t.Run("one minor up via the Cluster topology: all in place, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("-f", minor) // Cluster and namespace come from the file
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range append(cp, workers...) {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0->v1.36.0 in-place yes no none"))
		}
		g.Expect(out).To(ContainSubstring("+ KubeadmConfig spec.clusterConfiguration.featureGates.ControlPlaneKubeletLocalMode:"))
		g.Expect(out).To(HaveSuffix("\n5 machines: 5 in place, 0 replaced, 0 unchanged.\n"))
	})

	t.Run("a KubeadmControlPlane patch version: control plane in place, workers unchanged", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", kcpOnly)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range cp {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0->v1.35.2 in-place yes no none"))
		}
		for _, m := range workers {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 unchanged - - -"))
		}
	})

	t.Run("two minors up: all replaced with the reason, exit 2", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", twoMinors)
		var coded interface{ ExitCode() int }
		g.Expect(errors.As(err, &coded)).To(BeTrue(), "err: %v", err)
		g.Expect(coded.ExitCode()).To(Equal(ExitReplace))
		g.Expect(err).To(MatchError(ContainSubstring("5 machine(s) would be replaced")))
		for _, m := range append(cp, workers...) {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0->v1.37.0 replace yes (by Cluster API) - -"))
		}
		g.Expect(strings.Count(out, "skips a minor version: kubeadm upgrades one minor at a time")).To(Equal(2), "one block for the control plane, one for the workers")
	})

	t.Run("files change in a new KubeadmConfigTemplate: workers in place", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", files)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range workers {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 in-place yes no none"))
		}
		for _, m := range cp {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 unchanged - - -"))
		}
		g.Expect(out).To(ContainSubstring("demo-md-0-v1-0, demo-md-0-v1-1: in place (MachineDeployment: CanUpdateMachineSet)\n  + KubeadmConfigTemplate spec.template.spec.files:"))
	})

	// Three Secrets of 1 MiB: over the 2 MiB budget of referenced Secrets together.
	for i := range 3 {
		g.Expect(admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: fx.Namespace, Name: fmt.Sprintf("big-%d", i)},
			Data: map[string][]byte{"f": bytes.Repeat([]byte("x"), 1<<20)}})).To(Succeed())
	}
	fromSecrets := func(name string, secrets ...string) string {
		// The fixture's worker configuration (as in files.yaml), plus files from secrets.
		doc := "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfigTemplate\nmetadata: {name: " + name + ", namespace: fleet}\nspec:\n  template:\n    spec:\n" +
			"      joinConfiguration: {nodeRegistration: {kubeletExtraArgs: [{name: eviction-hard, value: \"nodefs.available<0%\"}]}}\n" +
			"      files:\n      - {path: /etc/motd, content: \"worker\\n\"}\n"
		for i, sec := range secrets {
			doc += fmt.Sprintf("      - {path: /etc/big-%d, contentFrom: {secret: {name: %s, key: f}}}\n", i, sec)
		}
		return file(name+".yaml", doc+"---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: demo-md-0, namespace: fleet}\n"+
			"spec:\n  template:\n    spec:\n      bootstrap:\n        configRef: {apiGroup: bootstrap.cluster.x-k8s.io, kind: KubeadmConfigTemplate, name: "+name+"}\n")
	}

	t.Run("files from Secrets over the budget: workers replaced with the budget and the Secrets, exit 2", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", fromSecrets("demo-md-0-big", "big-0", "big-1", "big-2"))
		g.Expect(ExitCode(err)).To(Equal(ExitReplace), "err: %v\n%s", err, out)
		for _, m := range workers {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 replace yes (by Cluster API) - -"))
		}
		g.Expect(out).To(ContainSubstring("KubeadmConfigTemplate demo-md-0-big files and users: the 3 Secrets the KubeadmConfig references hold more than 2097152 bytes (2 MiB)"))
		g.Expect(out).To(ContainSubstring("2 of them (big-0, big-1)"))
		g.Expect(out).To(ContainSubstring("passed at Secret big-1"))

		// One of them fits: in place.
		out, err = run("demo", "-n", "fleet", "-f", fromSecrets("demo-md-0-two", "big-0"))
		g.Expect(err).NotTo(HaveOccurred(), out)
		for _, m := range workers {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 in-place yes no none"))
		}
	})

	t.Run("a referenced Secret that does not exist yet is not counted, with a note", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", fromSecrets("demo-md-0-later", "big-0", "created-later"), "-o", "json")
		g.Expect(err).NotTo(HaveOccurred(), out)
		var r preview.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		g.Expect(r.Summary.InPlace).To(Equal(2))
		g.Expect(r.Notes).To(ContainElement(And(ContainSubstring("MachineDeployment/demo-md-0 references Secret(s) created-later, which do not exist"),
			ContainSubstring("CanUpdate and UpdateMachine count them when Cluster API updates the Machines"))))
		for _, m := range r.Machines {
			if m.Role == preview.RoleWorker {
				g.Expect(m.SecretsNotFound).To(Equal([]string{"created-later"}))
			}
		}
	})

	t.Run("OS image change with the extension's policy: workers in place with a rauc reboot", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", osImage, "--policy-file", policyFile)
		g.Expect(err).NotTo(HaveOccurred())
		for _, m := range workers {
			g.Expect(rows(out)).To(HaveKeyWithValue(m, "v1.35.0 in-place yes yes rauc"))
		}
		// Without the policy the image maps to no artifact: replaced, exit 2.
		out, err = run("demo", "-n", "fleet", "-f", osImage)
		g.Expect(ExitCode(err)).To(Equal(ExitReplace))
		g.Expect(out).To(ContainSubstring("is not mapped to a node-side OS artifact in the policy"))
	})

	t.Run("change from stdin", func(t *testing.T) {
		g := NewWithT(t)
		stdin = topology("v1.36.0")
		defer func() { stdin = "" }()
		out, err := run("-f", "-")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(HaveSuffix("\n5 machines: 5 in place, 0 replaced, 0 unchanged.\n"))
	})

	t.Run("json output", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", minor, "-o", "json")
		g.Expect(err).NotTo(HaveOccurred())
		var r preview.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
		g.Expect(r.APIVersion).To(Equal(preview.ReportAPIVersion))
		g.Expect(r.Kind).To(Equal(preview.ReportKind))
		g.Expect(r.Change).To(Equal(minor))
		g.Expect(r.Summary).To(Equal(preview.Summary{Machines: 5, InPlace: 5}))
		for _, m := range r.Machines {
			live := &clusterv1.Machine{}
			g.Expect(admin.Get(ctx, client.ObjectKey{Namespace: fx.Namespace, Name: m.Name}, live)).To(Succeed())
			g.Expect(m.UID).To(Equal(string(live.UID)))
			g.Expect(m.Verdict).To(Equal(preview.VerdictInPlace))
			g.Expect(m.DesiredVersion).To(Equal("v1.36.0"))
			g.Expect(m.Drain.Needed).To(BeTrue())
			g.Expect(m.Reboot.Needed).To(BeFalse())
		}
	})

	t.Run("yaml output parses back to the json document", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", twoMinors, "-o", "yaml")
		g.Expect(ExitCode(err)).To(Equal(ExitReplace), "exit 2 whatever the format")
		var fromYAML preview.Report
		g.Expect(sigsyaml.UnmarshalStrict([]byte(out), &fromYAML)).To(Succeed(), out)
		g.Expect(fromYAML.Kind).To(Equal(preview.ReportKind))
		g.Expect(fromYAML.Summary).To(Equal(preview.Summary{Machines: 5, Replace: 5}))
		jsonOut, _ := run("demo", "-n", "fleet", "-f", twoMinors, "-o", "json")
		var fromJSON preview.Report
		g.Expect(json.Unmarshal([]byte(jsonOut), &fromJSON)).To(Succeed())
		g.Expect(fromYAML).To(Equal(fromJSON))
	})

	t.Run("wide output adds NODE and PATH", func(t *testing.T) {
		g := NewWithT(t)
		out, err := run("demo", "-n", "fleet", "-f", files, "-o", "wide")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out).To(MatchRegexp(`(?m)^MACHINE\s+ROLE\s+OWNER\s+VERSION\s+VERDICT\s+DRAIN\s+REBOOT\s+BACKEND\s+NODE\s+PATH$`))
		for _, m := range workers {
			g.Expect(out).To(MatchRegexp(`(?m)^` + m + `\s+worker\s+.*\s+in-place\s+yes\s+no\s+none\s+` + m + `\s+MachineDeployment: CanUpdateMachineSet$`))
		}
		for _, m := range cp {
			g.Expect(out).To(MatchRegexp(`(?m)^` + m + `\s+control-plane\s+.*\s+unchanged\s+-\s+-\s+-\s+` + m + `\s+\S.*$`))
		}
		_, err = run("demo", "-n", "fleet", "-o", "xml")
		g.Expect(err).To(MatchError(ContainSubstring("--output must be one of table, wide, json, yaml")))
		g.Expect(ExitCode(err)).To(Equal(ExitError))
	})

	t.Run("unknown cluster: exit 1", func(t *testing.T) {
		g := NewWithT(t)
		_, err := run("nope", "-n", "fleet")
		g.Expect(err).To(MatchError(preview.ErrClusterNotFound))
		g.Expect(ExitCode(err)).To(Equal(1))
	})

	t.Run("no writes", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(guard.attempts()).To(BeEmpty())
		g.Expect(resourceVersions(ctx, t, admin, fx.Namespace)).To(Equal(before))
	})
}

// runPlan runs the plan command in-process and returns what it printed.
func runPlan(ctx context.Context, newClient newManagementClient, stdin string, args ...string) (string, error) {
	cmd := newPlanCommandWith("capi-inplace", newClient)
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// rows maps each Machine row of a plan table to its cells from VERSION on.
func rows(out string) map[string]string {
	got := map[string]string{}
	inTable := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "MACHINE":
			inTable = true
		case len(f) == 0:
			inTable = false
		case inTable && len(f) >= 5:
			got[f[0]] = strings.Join(f[3:], " ")
		}
	}
	return got
}

// writeGuard hands out management clients whose every write fails and is recorded.
type writeGuard struct {
	mu     sync.Mutex
	writes []string
}

func (w *writeGuard) refuse(verb string, obj any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, fmt.Sprintf("%s %T", verb, obj))
	return fmt.Errorf("plan must not write: %s", verb)
}

func (w *writeGuard) attempts() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

func (w *writeGuard) newClient(cfg *rest.Config, scheme *runtime.Scheme) (client.Client, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			return w.refuse("create", obj)
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			return w.refuse("update", obj)
		},
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			return w.refuse("patch", obj)
		},
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			return w.refuse("apply", obj)
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			return w.refuse("delete", obj)
		},
		DeleteAllOf: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteAllOfOption) error {
			return w.refuse("deleteAllOf", obj)
		},
		SubResourceCreate: func(_ context.Context, _ client.Client, sub string, obj client.Object, _ client.Object, _ ...client.SubResourceCreateOption) error {
			return w.refuse("create/"+sub, obj)
		},
		SubResourceUpdate: func(_ context.Context, _ client.Client, sub string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			return w.refuse("update/"+sub, obj)
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, sub string, obj client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
			return w.refuse("patch/"+sub, obj)
		},
		SubResourceApply: func(_ context.Context, _ client.Client, sub string, obj runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
			return w.refuse("apply/"+sub, obj)
		},
	}), nil
}

// TestPlanBackendCapabilities checks the capability table plan builds from the real
// backends: every backend name the policy accepts but script, with the reboot
// behaviour each mechanism documents. The harness's simulated backend is not in the
// product binary: plan assumes a reboot for it.
func TestPlanBackendCapabilities(t *testing.T) {
	g := NewWithT(t)
	caps := planBackendCapabilities(context.Background())
	var names []string
	for n := range caps {
		names = append(names, n)
	}
	sort.Strings(names)
	g.Expect(names).To(Equal([]string{"bootc", "mender", "none", "ostree", "packages", "rauc", "swupdate"}))
	for _, reboots := range []string{"bootc", "mender", "ostree", "rauc", "swupdate"} {
		g.Expect(caps[reboots].NeedsReboot).To(BeTrue(), reboots)
	}
	g.Expect(caps["packages"].NeedsReboot).To(BeFalse())
	g.Expect(caps["none"].NeedsReboot).To(BeFalse())
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
}

// resourceVersions returns "<kind>/<name>" -> resourceVersion for every object of the
// kinds the fixture uses in namespace.
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
