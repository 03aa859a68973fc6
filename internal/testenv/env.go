package testenv

import (
	"fmt"
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options says what the API server serves besides the built-in types.
type Options struct {
	// CAPI are Cluster API's CRD sets, read from the module cache.
	CAPI []CRDSet
	// ContractLabels installs the CAPI sets as CRD objects labelled with both
	// contract versions (cluster.x-k8s.io/v1beta1 and v1beta2), as a provider's
	// kustomization would: KCP and the topology code look an infrastructure
	// template's contract up from those labels.
	ContractLabels bool
	// InfraMachine adds InfraMachineCRD, a stand-in infrastructure machine.
	InfraMachine bool
	// CRDDirs are further CRD directories or files; each must exist.
	CRDDirs []string
	// CRDs are further CRD objects.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Webhooks are registered with the API server, pointing at a local
	// serving host, port and certificate directory (Env.Environment.WebhookInstallOptions).
	Webhooks envtest.WebhookInstallOptions
	// BinaryAssetsDirectory overrides KUBEBUILDER_ASSETS (bench passes bin/).
	BinaryAssetsDirectory string
}

// Env is a running API server.
type Env struct {
	// Config is the admin's rest config; nil when the environment was skipped.
	Config *rest.Config
	// Environment is envtest's, for AddUser, KubeConfig and WebhookInstallOptions.
	Environment *envtest.Environment
	// SkipReason says why Config is nil.
	SkipReason string
}

// Start starts an API server with what opts asks for. It does not apply the
// assets rule: call Assets or RequireAssets first (Main and StartT do).
func Start(opts Options) (*Env, error) {
	dirs, err := capiDirs(opts.CAPI)
	if err != nil {
		return nil, err
	}
	crds := append([]*apiextensionsv1.CustomResourceDefinition(nil), opts.CRDs...)
	if opts.ContractLabels {
		objs, err := ReadCRDs(dirs...)
		if err != nil {
			return nil, err
		}
		crds = append(crds, objs...)
		dirs = nil
	}
	if opts.InfraMachine {
		crds = append(crds, InfraMachineCRD())
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.BinaryAssetsDirectory,
		CRDDirectoryPaths:     append(dirs, opts.CRDDirs...),
		CRDs:                  crds,
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: opts.Webhooks,
	}
	cfg, err := env.Start()
	if err != nil {
		assets := opts.BinaryAssetsDirectory
		if assets == "" {
			assets = os.Getenv(AssetsEnv)
		}
		return nil, fmt.Errorf("start envtest (binaries from %s): %w", assets, err)
	}
	return &Env{Config: cfg, Environment: env}, nil
}

// Stop stops the API server; a skipped or nil Env has nothing to stop.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil || e.Config == nil {
		return nil
	}
	if err := e.Environment.Stop(); err != nil {
		return fmt.Errorf("stop envtest: %w", err)
	}
	return nil
}

// StartT applies RequireAssets, starts an API server for one test and stops it
// when the test ends.
func StartT(t testing.TB, opts Options) *Env {
	t.Helper()
	RequireAssets(t)
	e, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Log(err)
		}
	})
	return e
}

// Main is a TestMain body: it applies the assets rule, starts the API server
// into *out, runs the package's tests and stops it. Skipped locally, *out holds
// only SkipReason, the tests still run and Require skips them; in CI a missing
// KUBEBUILDER_ASSETS fails the package.
func Main(m *testing.M, opts Options, out **Env) int {
	return MainFunc(m, opts, out, nil)
}

// MainFunc is Main with setup run after the API server started and before the
// tests; setup's cleanup, when not nil, runs after them and before the API
// server stops. A setup error fails the package.
func MainFunc(m *testing.M, opts Options, out **Env, setup func(*Env) (cleanup func(), err error)) int {
	*out = &Env{}
	_, skip, err := Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skip != "" {
		(*out).SkipReason = skip
		return m.Run()
	}
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*out = e
	defer func() {
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if setup != nil {
		cleanup, err := setup(e)
		if cleanup != nil {
			defer cleanup()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// Require returns a copy of the admin's rest config or skips the test.
func (e *Env) Require(t testing.TB) *rest.Config {
	t.Helper()
	if e == nil || e.Config == nil {
		reason := "no envtest"
		if e != nil && e.SkipReason != "" {
			reason = e.SkipReason
		}
		t.Skip(reason)
	}
	return rest.CopyConfig(e.Config)
}
