package singlenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// suite is the envtest environment shared by the integration tests: a real
// kube-apiserver and etcd with Cluster API's CRDs, the hold webhook registered
// through a MutatingWebhookConfiguration, and a manager running SetupWithManager with
// a scripted Updater in place of the coordinator.
type suite struct {
	cfg      *rest.Config
	admin    client.Client // the manager's own user: the one allowed to release
	topology client.Client // another user, playing the topology controller / operator
	updater  *scriptedUpdater
	// controllerUser is the manager's username, the only one allowed to release.
	controllerUser string
	skip           string
	setupDone      bool
}

var env = &suite{}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	_, skip, err := testenv.Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skip != "" {
		env.skip = skip
		return m.Run()
	}
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: logVerbosity()}))

	hook := MutatingWebhook(admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: "capi-inplace-system", Name: "capi-inplace", Path: ptr.To(DefaultWebhookPath)},
	})
	te, err := testenv.Start(testenv.Options{
		CAPI:    []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane, testenv.KubeadmBootstrap},
		CRDDirs: []string{filepath.Join("testdata", "infra-crds.yaml")},
		Webhooks: envtest.WebhookInstallOptions{
			MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{{
				ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node"},
				Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
			}},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := te.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	testEnv, cfg := te.Environment, te.Config

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	wio := testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir,
		}),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env.updater = &scriptedUpdater{}
	// The manager's own user, as a deployment would configure its service account.
	review := &authenticationv1.SelfSubjectReview{}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := direct.Create(ctx, review); err != nil {
		fmt.Fprintf(os.Stderr, "SelfSubjectReview: %v\n", err)
		return 1
	}
	env.controllerUser = review.Status.UserInfo.Username
	plans, err := planner.New(policy.Builtin())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := createKubeadmConfigMap(ctx, direct); err != nil {
		fmt.Fprintf(os.Stderr, "kubeadm-config: %v\n", err)
		return 1
	}
	if err := SetupWithManager(mgr, Options{Updater: env.updater, Planner: plans, Workloads: sameClusterWorkloads{direct},
		Settings: map[string]string{"k": "v"}, ExtensionConfigName: testExtensionConfig, ControllerUsername: env.controllerUser,
		RecheckAfter: 300 * time.Millisecond}); err != nil {
		fmt.Fprintf(os.Stderr, "SetupWithManager: %v\n", err)
		return 1
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped: %v\n", err)
		}
	}()
	defer wg.Wait()
	defer cancel()

	env.cfg = cfg
	if env.admin, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	topoUser, err := testEnv.AddUser(envtest.User{Name: "capi-topology", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "add user: %v\n", err)
		return 1
	}
	if env.topology, err = client.New(topoUser.Config(), client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.setupDone = true
	return m.Run()
}

func logVerbosity() int {
	if os.Getenv("SINGLENODE_TEST_VERBOSE") != "" {
		return 1
	}
	return 0
}

// require skips (locally) or fails (CI) when the environment is missing.
func (s *suite) require(t *testing.T) {
	t.Helper()
	if !s.setupDone {
		t.Skip(s.skip)
	}
}

// scriptedUpdater plays the coordinator: per Machine name a script of outcomes,
// the last one repeating; every request is recorded.
type scriptedUpdater struct {
	mu       sync.Mutex
	scripts  map[string][]coordinator.Outcome
	requests map[string][]coordinator.DesiredNode
	// sequence is every call's Machine name, in call order.
	sequence []string
	// first runs once, at a Machine's first call, before it is answered.
	first map[string]func()
}

// onFirstCall runs fn at the first call for machine (outside the lock).
func (u *scriptedUpdater) onFirstCall(machine string, fn func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.first == nil {
		u.first = map[string]func(){}
	}
	u.first[machine] = fn
}

// order returns the calls among names, in call order.
func (u *scriptedUpdater) order(names ...string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, n := range u.sequence {
		for _, want := range names {
			if n == want {
				out = append(out, n)
			}
		}
	}
	return out
}

func (u *scriptedUpdater) script(machine string, outcomes ...coordinator.Outcome) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.scripts == nil {
		u.scripts = map[string][]coordinator.Outcome{}
	}
	u.scripts[machine] = outcomes
}

func (u *scriptedUpdater) calls(machine string) []coordinator.DesiredNode {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]coordinator.DesiredNode(nil), u.requests[machine]...)
}

func (u *scriptedUpdater) UpdateNode(_ context.Context, d coordinator.DesiredNode) coordinator.Outcome {
	name := d.Machine.Name
	u.mu.Lock()
	fn := u.first[name]
	delete(u.first, name)
	u.mu.Unlock()
	if fn != nil {
		fn()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sequence = append(u.sequence, name)
	if u.requests == nil {
		u.requests = map[string][]coordinator.DesiredNode{}
	}
	u.requests[name] = append(u.requests[name], d)
	script := u.scripts[name]
	if len(script) == 0 {
		return coordinator.Outcome{Kind: coordinator.OutcomeInProgress, RetryAfterSeconds: 1, Message: "waiting (no script)"}
	}
	next := script[0]
	if len(script) > 1 {
		u.scripts[name] = script[1:]
	}
	return next
}

func inProgress(retry int32, msg string) coordinator.Outcome {
	return coordinator.Outcome{Kind: coordinator.OutcomeInProgress, RetryAfterSeconds: retry, Message: msg}
}

func done(msg string) coordinator.Outcome {
	return coordinator.Outcome{Kind: coordinator.OutcomeDone, Message: msg}
}

func failedFinal(cause coordinator.Cause, msg string) coordinator.Outcome {
	return coordinator.Outcome{Kind: coordinator.OutcomeFailedFinal, Cause: cause, Message: msg}
}

// sameClusterWorkloads plays every workload cluster with the test API server itself:
// the kubeadm-config ConfigMap is kube-system/kubeadm-config there.
type sameClusterWorkloads struct{ c client.Client }

func (w sameClusterWorkloads) WorkloadClient(context.Context, client.ObjectKey) (client.Client, error) {
	return w.c, nil
}
