package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/status"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestKubectlPlugin builds cmd/kubectl-inplace, puts it on PATH as kubectl-inplace
// and runs the real kubectl (bin/kubectl, built by make tools) against a real
// kube-apiserver with Cluster API's CRDs: `kubectl plugin list` finds the plugin and
// `kubectl inplace status` prints what the Clusters, Machines and Nodes say, with
// kubectl's flags (--kubeconfig, --context, -n, -A, -o) and the documented exit codes
// through kubectl (kubectl execs the plugin).
func TestKubectlPlugin(t *testing.T) {
	kubectl := filepath.Join(testenv.RequireAssets(t), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl missing in KUBEBUILDER_ASSETS (make tools builds it): %v", err)
	}
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	pluginDir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(pluginDir, "kubectl-inplace"), "github.com/capi-inplace/capi-inplace/cmd/kubectl-inplace")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build kubectl-inplace: %v\n%s", err, out)
	}

	te := testenv.StartT(t, testenv.Options{CAPI: []testenv.CRDSet{testenv.CAPICore}})
	env, cfg := te.Environment, te.Config
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())

	// A kubeconfig whose current context points at a closed port and whose context
	// "mgmt" (namespace "fleet") is the API server: only --context reaches it.
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigPath, twoContexts(t, env.KubeConfig), 0o600)).To(Succeed())

	now := time.Now().UTC().Truncate(time.Second)
	plan := "sha256-cccccccccccccccc"
	mk := fixtures{t: t, ctx: ctx, c: c}
	mk.namespace("fleet")
	mk.cluster("fleet", "edge", env.KubeConfig)
	mk.machine("fleet", "edge", "edge-cp-0", true, "v1.36.0", "edge-cp-0", metav1.ConditionFalse)
	mk.machine("fleet", "edge", "edge-md-0", false, "v1.36.0", "edge-md-0", metav1.ConditionTrue)
	mk.node("edge-cp-0", "v1.36.0", false, map[string]string{
		inplacev1.DesiredPlanAnnotation: plan, inplacev1.CurrentPlanAnnotation: plan,
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: plan, Phase: protocol.PhaseCommitted, Step: 5, Steps: 5,
			StartedAt: now.Add(-3 * time.Minute), UpdatedAt: now.Add(-time.Minute)}),
	})
	mk.node("edge-md-0", "v1.35.0", true, map[string]string{
		inplacev1.DesiredPlanAnnotation: plan, inplacev1.CordonedByAnnotation: "capi-inplace",
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: plan, Phase: protocol.PhaseApplying, Step: 2, Steps: 5,
			Action: "kubeadm-upgrade", StartedAt: now.Add(-40 * time.Second), UpdatedAt: now}),
	})
	mk.namespace("lab")
	mk.cluster("lab", "bad", env.KubeConfig)
	mk.machine("lab", "bad", "bad-md-0", false, "v1.36.0", "bad-md-0", metav1.ConditionTrue)
	mk.node("bad-md-0", "v1.35.0", false, map[string]string{
		inplacev1.DesiredPlanAnnotation: plan,
		inplacev1.StatusAnnotation: encode(t, protocol.NodeStatus{PlanHash: plan, Phase: protocol.PhaseFailed, Step: 3, Steps: 5,
			Reason: "HealthGateFailed", Message: "kubelet not Ready", StartedAt: now.Add(-2 * time.Minute), UpdatedAt: now}),
	})

	// kubectl finds plugins on PATH; HOME keeps kubectl's caches out of the real one.
	pathEnv := append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir())
	runKubectl := func(args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env = pathEnv
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("run kubectl %v: %v", args, err)
		}
		return out.String(), errOut.String(), code
	}
	inplace := func(args ...string) (string, string, int) {
		return runKubectl(append([]string{"inplace"}, append(args, "--kubeconfig", kubeconfigPath)...)...)
	}

	t.Run("kubectl plugin list finds kubectl-inplace", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := runKubectl("plugin", "list", "--name-only")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(strings.Fields(out)).To(ContainElement("kubectl-inplace"))
		g.Expect(errOut).NotTo(ContainSubstring("kubectl-inplace"), "no warning about our plugin (overshadowed, not executable)")
	})

	t.Run("status -A -o json: every namespace, exit 3 for the failed node", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := inplace("status", "-A", "-o", "json", "--context", "mgmt")
		g.Expect(code).To(Equal(ExitNodeFailed), errOut)
		g.Expect(errOut).To(ContainSubstring("in-place update failed on 1 machine(s): lab/bad-md-0 (Failed)"))
		var r status.Report
		g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed(), out)
		g.Expect(r.Kind).To(Equal(status.ReportKind))
		g.Expect(r.Namespace).To(BeEmpty())
		g.Expect(r.Summary).To(Equal(status.Summary{Machines: 3, InProgress: 1, Failed: 1}))
		g.Expect(r.Clusters).To(HaveLen(2))
		g.Expect(r.Clusters[0].Namespace + "/" + r.Clusters[0].Name).To(Equal("fleet/edge"))
		g.Expect(r.Clusters[1].Namespace + "/" + r.Clusters[1].Name).To(Equal("lab/bad"))
		ms := r.Clusters[0].Machines
		g.Expect(ms).To(HaveLen(2))
		g.Expect(ms[0]).To(And(HaveField("Name", "edge-cp-0"), HaveField("Phase", protocol.PhaseCommitted), HaveField("KubeletVersion", "v1.36.0")))
		g.Expect(ms[1]).To(And(HaveField("Name", "edge-md-0"), HaveField("Phase", protocol.PhaseApplying),
			HaveField("Step", 2), HaveField("Drain.State", status.DrainCordoned), HaveField("KubeletVersion", "v1.35.0")))
		g.Expect(r.Clusters[1].Machines).To(ConsistOf(And(HaveField("Name", "bad-md-0"), HaveField("Failure", "HealthGateFailed: kubelet not Ready"))))
	})

	t.Run("the context's namespace, -o yaml, exit 0", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := inplace("status", "--context", "mgmt", "-o", "yaml")
		g.Expect(code).To(Equal(0), errOut)
		var r status.Report
		g.Expect(yaml.UnmarshalStrict([]byte(out), &r)).To(Succeed(), out)
		g.Expect(r.Namespace).To(Equal("fleet"), "the context's namespace")
		g.Expect(r.Clusters).To(ConsistOf(HaveField("Name", "edge")))
	})

	t.Run("-n and -o wide", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := inplace("status", "bad", "-n", "lab", "--context", "mgmt", "-o", "wide")
		g.Expect(code).To(Equal(ExitNodeFailed), errOut)
		g.Expect(out).To(HavePrefix("CLUSTER lab/bad\n"))
		g.Expect(out).To(MatchRegexp(`(?m)^MACHINE\s+ROLE\s+.*\s+UP-TO-DATE\s+NODE\s+MACHINE-PHASE\s+PLAN\s+REPORTED\s+DETAILS$`))
		g.Expect(out).To(MatchRegexp(`(?m)^bad-md-0\s+worker\s+.*\s+bad-md-0\s+Running\s+` + plan + `\s+` + now.Format(time.RFC3339) + `\s+HealthGateFailed: kubelet not Ready$`))
	})

	t.Run("without --context: the current context's closed port, exit 1", func(t *testing.T) {
		g := NewWithT(t)
		_, errOut, code := inplace("status", "-A")
		g.Expect(code).To(Equal(ExitError))
		g.Expect(errOut).To(ContainSubstring("127.0.0.1:1"))
	})

	t.Run("bad -o, exit 1; help says kubectl inplace", func(t *testing.T) {
		g := NewWithT(t)
		_, errOut, code := inplace("status", "-o", "xml", "--context", "mgmt")
		g.Expect(code).To(Equal(ExitError))
		g.Expect(errOut).To(ContainSubstring("--output must be one of table, wide, json, yaml"))
		out, _, code := runKubectl("inplace", "status", "--help")
		g.Expect(code).To(Equal(0))
		g.Expect(out).To(ContainSubstring("kubectl inplace status [cluster] [flags]"))
		g.Expect(out).To(ContainSubstring("kubectl inplace status -A -o wide"))
	})
}

// twoContexts rewrites an envtest kubeconfig into two contexts: the current one,
// "closed", whose server is a closed port, and "mgmt" (namespace fleet), the real one.
func twoContexts(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	api := cfg.Clusters[cur.Cluster].DeepCopy()
	closed := api.DeepCopy()
	closed.Server = "https://127.0.0.1:1"
	cfg.Clusters = map[string]*clientcmdapi.Cluster{"real": api, "closed": closed}
	cfg.Contexts = map[string]*clientcmdapi.Context{
		"mgmt":   {Cluster: "real", AuthInfo: cur.AuthInfo, Namespace: "fleet"},
		"closed": {Cluster: "closed", AuthInfo: cur.AuthInfo},
	}
	cfg.CurrentContext = "closed"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
