package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/yaml"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

var testEnv *Env

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

// runTests starts envtest with Cluster API's core and kubeadm bootstrap CRDs (from
// the module cache) for the tests that need an API server; without
// KUBEBUILDER_ASSETS they skip locally and fail in CI.
func runTests(m *testing.M) int {
	assets, skip, err := testenv.Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skip != "" {
		return m.Run()
	}
	root, err := testenv.ModuleDir("", "sigs.k8s.io/cluster-api")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The coordinator reads every Machine's infrastructure machine: a stand-in CRD
	// for CAPD's DevMachine, whose CRD is in a module the tests do not download.
	infraDir := filepath.Join(dir, "infra-crd")
	crd, err := yaml.Marshal(testenv.InfraMachineCRD())
	if err == nil {
		err = os.MkdirAll(infraDir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(infraDir, "devmachines.yaml"), crd, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testEnv, err = StartEnvWithCRDs(assets, []string{
		filepath.Join(root, "core", "config", "crd", "bases"),
		filepath.Join(root, "bootstrap", "kubeadm", "config", "crd", "bases"),
		infraDir,
	}, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testEnv.Stop()
	return m.Run()
}

// TestUpdateMachineSteadyStateIsReadOnly checks the premise of the UpdateMachine
// load: after DriveToWaiting every call answers "waiting ... Applying" with
// retryAfterSeconds and writes nothing (node and plan Secret unchanged), through
// the real hook server over HTTPS.
func TestUpdateMachineSteadyStateIsReadOnly(t *testing.T) {
	if testEnv == nil {
		t.Skip("KUBEBUILDER_ASSETS not set (run make test)")
	}
	g := NewWithT(t)
	ctx := context.Background()
	c, err := client.New(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	objs := ClusterObjects{Namespace: "steady", Cluster: "edge", Machines: 2, Kubeconfig: testEnv.KubeconfigData}
	machines, err := objs.Create(ctx, c)
	g.Expect(err).NotTo(HaveOccurred())
	h, err := NewHandlers(testEnv.Config, testEnv.Scheme, true)
	g.Expect(err).NotTo(HaveOccurred())
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := StartInProcess(sctx, "test", h, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred())
	calls := make([]Call, len(machines))
	for i, m := range machines {
		req, err := UpdateMachineRequest(ctx, c, m)
		g.Expect(err).NotTo(HaveOccurred())
		calls[i], err = Encode(runtimehooksv1.UpdateMachine, extension.HandlerUpdateMachine, req)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(DriveToWaiting(ctx, srv.Client, c, machines, calls)).To(Succeed())

	versions := func() []string {
		var out []string
		for i := range machines {
			n := &corev1.Node{}
			g.Expect(c.Get(ctx, client.ObjectKey{Name: objs.NodeName(i)}, n)).To(Succeed())
			s := &corev1.Secret{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(n.Name)}, s)).To(Succeed())
			out = append(out, n.ResourceVersion, s.ResourceVersion)
		}
		return out
	}
	before := versions()
	for range 3 {
		for _, call := range calls {
			var a Answer
			g.Expect(srv.Client.Do(ctx, call, &a)).To(Succeed())
			g.Expect(a.Status).To(Equal("Success"))
			g.Expect(a.RetryAfterSeconds).To(BeNumerically(">", 0))
			g.Expect(a.Message).To(HavePrefix("step 5/6: waiting for the agent on node "))
			g.Expect(a.Message).To(HaveSuffix("Applying (2/4 files)"))
		}
	}
	g.Expect(versions()).To(Equal(before), "the waiting path writes nothing")
}
