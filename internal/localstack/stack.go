package localstack

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/freeport"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure a Stack. The zero value of every field but BinDir is usable.
type Options struct {
	// BinDir holds kube-apiserver, etcd, the capi-* managers, bin/capi-config and
	// capi-inplace (make tools-capi build).
	BinDir string
	// ArtifactsDir receives every process's log and collected objects.
	ArtifactsDir string
	// TempDir is the parent of the stack's temporary root (default os.TempDir()).
	TempDir string
	// KeepTemp keeps the temporary root after Stop (for debugging).
	KeepTemp bool
	// DisableInPlaceUpdatesGate starts the managers with InPlaceUpdates=false.
	DisableInPlaceUpdatesGate bool
	// DirectWorkloadAPI makes the simulated agents talk to the in-memory workload API
	// servers directly instead of through the gap-filling proxy (apiproxy.go).
	DirectWorkloadAPI bool
	// ManagerArgs are added to every manager's command line (e.g. "-v=4").
	ManagerArgs []string
	// DockerHost, when set, is the Docker engine in which the Dev provider's Docker
	// backend creates machines (capi-dev-manager's DOCKER_HOST); the stack's
	// processes must then run where that engine's container network is reachable
	// (test/e2ereal runs them in the engine's network namespace).
	DockerHost string
	// Out receives progress lines (default io.Discard).
	Out io.Writer
}

// FeatureGates returns the --feature-gates value the managers run with.
func (o Options) FeatureGates() string {
	inPlace := "true"
	if o.DisableInPlaceUpdatesGate {
		inPlace = "false"
	}
	return "InPlaceUpdates=" + inPlace + ",RuntimeSDK=true,ClusterTopology=true,MachineTaintPropagation=true"
}

// Stack is a running management cluster: envtest control plane plus the upstream
// managers as processes. Stop tears everything down and may be called more than once.
type Stack struct {
	opts Options

	// Config and Client reach the management cluster as admin.
	Config *rest.Config
	Client client.Client
	// KubeconfigPath is an admin kubeconfig for the management cluster.
	KubeconfigPath string
	// TempRoot is the stack's temporary root directory.
	TempRoot string

	env      *envtest.Environment
	webhooks map[Provider]*envtest.WebhookInstallOptions

	mu        sync.Mutex
	processes []*Process
	stopped   bool
	stopFns   []func()
}

// Scheme returns the scheme the stack's client uses: core Kubernetes plus the CAPI
// core, kubeadm control plane, kubeadm bootstrap and runtime types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme,
		bootstrapv1.AddToScheme, runtimev1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

func (s *Stack) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.Out, "[localstack %s] "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05.000")}, args...)...)
}

// Start brings up the control plane and the four managers and waits until every
// manager serves its webhooks and reports ready. On error everything started so far
// is torn down.
func Start(ctx context.Context, opts Options) (_ *Stack, retErr error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.BinDir == "" {
		return nil, errors.New("localstack: BinDir is required")
	}
	if opts.ArtifactsDir == "" {
		opts.ArtifactsDir = filepath.Join(opts.BinDir, "..", "_artifacts")
	}
	for _, b := range []string{"kube-apiserver", "etcd", "capi-core-manager", "capi-kcp-manager", "capi-bootstrap-manager", "capi-dev-manager", "capi-config/.complete"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, b)); err != nil {
			return nil, fmt.Errorf("localstack: %s missing in %s (run make tools-capi): %w", b, opts.BinDir, err)
		}
	}
	if err := os.MkdirAll(opts.ArtifactsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create artifacts dir: %w", err)
	}
	tmp, err := os.MkdirTemp(opts.TempDir, "capi-inplace-localstack-")
	if err != nil {
		return nil, fmt.Errorf("create temp root: %w", err)
	}
	s := &Stack{opts: opts, TempRoot: tmp, webhooks: map[Provider]*envtest.WebhookInstallOptions{}}
	defer func() {
		if retErr != nil {
			s.Stop()
		}
	}()
	start := time.Now()

	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range providers {
		c, err := loadCRDs(filepath.Join(opts.BinDir, "capi-config", string(p), "crd"))
		if err != nil {
			return nil, err
		}
		crds = append(crds, c...)
	}
	s.env = &envtest.Environment{
		BinaryAssetsDirectory: opts.BinDir,
		CRDInstallOptions:     envtest.CRDInstallOptions{CRDs: crds},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := s.env.Start()
	if err != nil {
		s.env = nil
		return nil, fmt.Errorf("start envtest control plane: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	s.Config = cfg
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	if s.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("create management client: %w", err)
	}
	s.KubeconfigPath = filepath.Join(tmp, "management.kubeconfig")
	if err := os.WriteFile(s.KubeconfigPath, s.env.KubeConfig, 0o600); err != nil {
		return nil, fmt.Errorf("write management kubeconfig: %w", err)
	}
	s.logf("control plane up with %d CRDs in %s", len(crds), time.Since(start).Round(time.Millisecond))

	type started struct {
		p      *Process
		health int
		hook   *envtest.WebhookInstallOptions
	}
	var all []started
	for _, p := range providers {
		hooks, err := loadWebhooks(filepath.Join(opts.BinDir, "capi-config", string(p), "webhook", "manifests.yaml"), p)
		if err != nil {
			return nil, err
		}
		w := &envtest.WebhookInstallOptions{
			MutatingWebhooks:   hooks.mutating,
			ValidatingWebhooks: hooks.validating,
			LocalServingHost:   "127.0.0.1",
		}
		if err := w.Install(cfg); err != nil {
			return nil, fmt.Errorf("install webhooks of %s: %w", p, err)
		}
		s.webhooks[p] = w
		if p == ProviderDev {
			if err := waitPortFree(ctx, s, inMemoryDebugPort, 5*time.Minute); err != nil {
				return nil, err
			}
		}
		health, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		diag, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		args := []string{
			"--leader-elect=false",
			fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", diag), "--insecure-diagnostics",
			fmt.Sprintf("--health-addr=127.0.0.1:%d", health),
			fmt.Sprintf("--webhook-port=%d", w.LocalServingPort),
			"--webhook-cert-dir=" + w.LocalServingCertDir,
			"--feature-gates=" + opts.FeatureGates(),
		}
		args = append(args, opts.ManagerArgs...)
		env := []string{"KUBECONFIG=" + s.KubeconfigPath, "POD_IP=127.0.0.1"}
		if p == ProviderDev && opts.DockerHost != "" {
			env = append(env, "DOCKER_HOST="+opts.DockerHost)
		}
		proc, err := s.StartProcess(ProcessSpec{
			Name: "capi-" + string(p) + "-manager",
			Path: filepath.Join(opts.BinDir, "capi-"+string(p)+"-manager"),
			Args: args,
			Env:  env,
		})
		if err != nil {
			return nil, err
		}
		all = append(all, started{p: proc, health: health, hook: w})
	}
	for _, st := range all {
		readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", st.health)
		hookAddr := fmt.Sprintf("127.0.0.1:%d", st.hook.LocalServingPort)
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := st.p.WaitReady(wctx, "ready and serving webhooks", func(ctx context.Context) error {
			if err := httpOK(ctx, readyz); err != nil {
				return err
			}
			return tlsDial(hookAddr)
		})
		cancel()
		if err != nil {
			return nil, err
		}
	}
	s.logf("managers ready (gates %s) in %s", opts.FeatureGates(), time.Since(start).Round(time.Millisecond))
	return s, nil
}

// StartProcess starts a process whose log goes to the artifacts directory and that
// Stop kills.
func (s *Stack) StartProcess(spec ProcessSpec) (*Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, errors.New("localstack: stack stopped")
	}
	if spec.LogDir == "" {
		spec.LogDir = s.opts.ArtifactsDir
	}
	p, err := StartProcess(spec)
	if err != nil {
		return nil, err
	}
	s.processes = append(s.processes, p)
	return p, nil
}

// OnStop registers fn to run at Stop before the processes are killed (in reverse
// order of registration).
func (s *Stack) OnStop(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopFns = append(s.stopFns, fn)
}

// BinDir returns the directory of the binaries.
func (s *Stack) BinDir() string { return s.opts.BinDir }

// ArtifactsDir returns where logs are written.
func (s *Stack) ArtifactsDir() string { return s.opts.ArtifactsDir }

// Stop kills every process (newest first), stops the control plane and removes the
// temporary root. It is safe to call more than once and from a signal handler.
func (s *Stack) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	procs := s.processes
	fns := s.stopFns
	s.mu.Unlock()

	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	var wg sync.WaitGroup
	for i := len(procs) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *Process) {
			defer wg.Done()
			p.Stop(5 * time.Second)
		}(procs[i])
	}
	wg.Wait()
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			s.logf("stop control plane: %v", err)
		}
	}
	for _, w := range s.webhooks {
		_ = w.Cleanup()
	}
	if !s.opts.KeepTemp && s.TempRoot != "" {
		_ = os.RemoveAll(s.TempRoot)
	}
	s.logf("stack stopped")
}

func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func tlsDial(addr string) error {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
	if err != nil {
		return err
	}
	return conn.Close()
}

// inMemoryDebugPort is the fixed port the Dev provider's in-memory backend listens on
// (CAPI v1.14.2 inmemory/pkg/server DefaultDebugPort, not configurable; workload API
// servers take ports from 20000 up). Only one in-memory provider can run per machine.
const inMemoryDebugPort = 19000

// waitPortFree waits until nothing listens on port (another stack on this machine,
// for example a demo, holds it), or fails after timeout with a clear message.
func waitPortFree(ctx context.Context, s *Stack, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	logged := false
	for {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err == nil {
			_ = l.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d stays in use: another in-memory Cluster API provider runs on this machine (only one can): %w", port, err)
		}
		if !logged {
			s.logf("waiting for port %d: another in-memory provider runs on this machine", port)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
