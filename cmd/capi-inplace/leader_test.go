package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
)

// TestManagerOptions: the leader releases its Lease when it stops, and the
// manager's wait for its runnables ends before the kubelet's SIGKILL of a pod
// with the default 30 s grace period, so that the release happens.
func TestManagerOptions(t *testing.T) {
	tests := []struct {
		name        string
		leaderElect bool
		namespace   string
	}{
		{"leader election", true, "capi-inplace-system"},
		{"no leader election", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := managerOptions(extensionOptions{leaderElect: tt.leaderElect, leaderElectNamespace: tt.namespace, healthAddr: ":9440"},
				runtime.NewScheme(), metricsserver.Options{BindAddress: "0"})
			g.Expect(o.LeaderElection).To(Equal(tt.leaderElect))
			g.Expect(o.LeaderElectionID).To(Equal("capi-inplace-extension"), "the Lease name docs/high-availability.md and test/e2e name")
			g.Expect(o.LeaderElectionNamespace).To(Equal(tt.namespace))
			g.Expect(o.LeaderElectionReleaseOnCancel).To(BeTrue())
			g.Expect(o.GracefulShutdownTimeout).NotTo(BeNil())
			g.Expect(*o.GracefulShutdownTimeout).To(Equal(shutdownTimeout))
			g.Expect(o.HealthProbeBindAddress).To(Equal(":9440"))
			g.Expect(o.Cache.DefaultTransform).NotTo(BeNil(), "managerCacheOptions")
		})
	}
}

// helperArgsEnv carries the extension's flags to the test binary re-executed as
// the capi-inplace process (TestHelperExtensionProcess).
const helperArgsEnv = "CAPI_INPLACE_TEST_EXTENSION_ARGS"

// TestHelperExtensionProcess is not a test: re-executed by
// TestExtensionReleasesLeaseOnStop with helperArgsEnv set, this process is
// `capi-inplace extension` run by main (its signal handler, its exit), so that a
// real SIGTERM reaches it. controller-runtime's controller names are unique per
// process, which is one more reason not to run a second extension in the test's.
func TestHelperExtensionProcess(t *testing.T) {
	raw := os.Getenv(helperArgsEnv)
	if raw == "" {
		t.Skip("run by TestExtensionReleasesLeaseOnStop only")
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		t.Fatal(err)
	}
	os.Args = append([]string{"capi-inplace", "extension"}, args...)
	main()
	os.Exit(0) // main returned: the manager stopped without error
}

// TestExtensionReleasesLeaseOnStop runs `capi-inplace extension --leader-elect`
// as its own process (main, its signal handler) against a real kube-apiserver
// until it holds the Lease, then sends it SIGTERM, as the kubelet does to a pod
// being deleted: the process exits 0 and the Lease it held has no holder, so
// another replica takes it at its next retry instead of after the 15 s lease.
// Before LeaderElectionReleaseOnCancel (checked by flipping it) the stopped
// leader's identity stayed on the Lease until it expired.
func TestExtensionReleasesLeaseOnStop(t *testing.T) {
	g := NewWithT(t)
	kubeconfig := startExtensionEnvtest(t)
	certDir := filepath.Join(t.TempDir(), "certs")
	g.Expect(os.Mkdir(certDir, 0o700)).To(Succeed())
	_, err := extensiontest.WriteSelfSignedCert(certDir)
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())

	args, err := json.Marshal([]string{
		"--kubeconfig", kubeconfig,
		"--webhook-host", "127.0.0.1",
		"--webhook-port", fmt.Sprint(freeTCPPort(t)),
		"--webhook-cert-dir", certDir,
		"--diagnostics-address", "0",
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)),
		"--manage-agents=false",
		"--leader-elect",
		"--leader-elect-namespace", metav1.NamespaceDefault,
	})
	g.Expect(err).NotTo(HaveOccurred())
	var out bytes.Buffer
	proc := exec.Command(os.Args[0], "-test.run=^TestHelperExtensionProcess$")
	proc.Env = append(os.Environ(), helperArgsEnv+"="+string(args))
	proc.Stdout, proc.Stderr = &out, &out
	g.Expect(proc.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- proc.Wait() }()
	exited := false
	defer func() {
		if !exited {
			_ = proc.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("extension output:\n%s", out.String())
		}
	}()

	ctx := context.Background()
	leases := cs.CoordinationV1().Leases(metav1.NamespaceDefault)
	var holder string
	g.Eventually(func() (string, error) {
		select {
		case err := <-done:
			exited = true
			return "", StopTrying(fmt.Sprintf("extension exited early: %v", err))
		default:
		}
		l, err := leases.Get(ctx, leaderElectionID, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder, nil
	}, 60*time.Second, 200*time.Millisecond).ShouldNot(BeEmpty(), "the only replica leads")

	signalled := time.Now()
	g.Expect(proc.Process.Signal(syscall.SIGTERM)).To(Succeed())
	select {
	case err := <-done:
		exited = true
		g.Expect(err).NotTo(HaveOccurred(), "exit status 0 after SIGTERM")
	case <-time.After(shutdownTimeout + 10*time.Second):
		t.Fatal("the extension did not exit after SIGTERM")
	}
	t.Logf("the extension exited %s after SIGTERM", time.Since(signalled).Round(time.Millisecond))

	l, err := leases.Get(ctx, leaderElectionID, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	after := ""
	if l.Spec.HolderIdentity != nil {
		after = *l.Spec.HolderIdentity
	}
	g.Expect(after).To(BeEmpty(), "the stopped leader %s released the Lease", holder)
}

// TestShutdownFitsTheGracePeriod: the extension's Deployment gives a SIGTERMed
// pod more time than the graceful shutdown takes, with room for the Lease release
// and the exit after it; otherwise the kubelet SIGKILLs it first and the Lease is
// held until it expires.
func TestShutdownFitsTheGracePeriod(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "manager", "manager.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	dep := &appsv1.Deployment{}
	g.Expect(sigsyaml.Unmarshal(raw, dep)).To(Succeed())
	g.Expect(dep.Kind).To(Equal("Deployment"))
	grace := dep.Spec.Template.Spec.TerminationGracePeriodSeconds
	g.Expect(grace).NotTo(BeNil(), "config/manager sets terminationGracePeriodSeconds")
	const releaseAndExit = 5 * time.Second
	g.Expect(shutdownTimeout + releaseAndExit).To(BeNumerically("<=", time.Duration(*grace)*time.Second))
}
