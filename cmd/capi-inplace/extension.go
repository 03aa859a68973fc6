package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capi-inplace/capi-inplace/internal/cachedread"
	"github.com/capi-inplace/capi-inplace/internal/cli"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/fleetrollout"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
)

// extensionOptions are the flags of `capi-inplace extension`.
type extensionOptions struct {
	kubeconfig           string
	webhookPort          int
	admissionPort        int
	webhookHost          string
	webhookCertDir       string
	diagnosticsAddress   string
	insecureDiagnostics  bool
	healthAddr           string
	profilerAddress      string
	leaderElect          bool
	leaderElectNamespace string
	policyFile           string
	manageAgents         bool
	agentImage           string
	extensionConfigName  string
	verbosity            int
}

func newExtensionCommand() *cobra.Command { return newExtensionCommandWith(runExtension) }

// newExtensionCommandWith is `capi-inplace extension` running run with the parsed
// flags.
func newExtensionCommandWith(run func(context.Context, extensionOptions) error) *cobra.Command {
	o := extensionOptions{}
	cmd := &cobra.Command{
		Use:   "extension",
		Short: "Serve the Cluster API in-place update hooks (CanUpdateMachine, CanUpdateMachineSet, UpdateMachine)",
		Long: `extension runs the Cluster API runtime extension that decides which machine
changes can be applied in place and then applies them. It serves the runtime hooks
over HTTPS (register it with an ExtensionConfig whose caBundle is the CA of
--webhook-cert-dir/tls.crt) and runs inside a controller-runtime manager.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the management cluster's kubeconfig; empty means in-cluster config, then $KUBECONFIG, then ~/.kube/config.")
	f.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the runtime hook server (HTTPS).")
	f.IntVar(&o.admissionPort, "admission-port", 0, "Port of a separate HTTPS server for the single-node hold admission webhook (same certificate), so that a NetworkPolicy can admit the API server there and only Cluster API's controllers to the hooks; 0 serves it on the hook server.")
	f.StringVar(&o.webhookHost, "webhook-host", "", "Address the runtime hook server listens on; empty means all addresses.")
	f.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs/", "Directory holding tls.crt and tls.key for the hook server; changes to them are picked up without a restart.")
	f.StringVar(&o.diagnosticsAddress, "diagnostics-address", ":8443", "Address of the diagnostics endpoint (/metrics); \"0\" disables it. Served over HTTPS with Kubernetes authentication and authorization unless --insecure-diagnostics.")
	f.BoolVar(&o.insecureDiagnostics, "insecure-diagnostics", false, "Serve diagnostics over plain HTTP without authentication or authorization.")
	f.StringVar(&o.healthAddr, "health-addr", ":9440", "Address of the health probes (/healthz, /readyz).")
	f.StringVar(&o.profilerAddress, "profiler-address", "", "Address of the pprof endpoint (e.g. localhost:6060), as Cluster API's controllers have it; empty disables it. Plain HTTP without authentication: bind it to localhost.")
	f.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among replicas; only the leader runs the coordinator's controllers. Every replica serves the hooks.")
	f.StringVar(&o.leaderElectNamespace, "leader-elect-namespace", "", "Namespace of the leader election lease; empty means the pod's own namespace.")
	f.StringVar(&o.policyFile, "policy-file", "", "Path to the policy file (YAML or JSON); empty means the built-in policy (no OS image artifacts, bootstrap-only fields refused).")
	f.BoolVar(&o.manageAgents, "manage-agents", true, "Install and upgrade the node agent (DaemonSet and RBAC) in each workload cluster.")
	f.StringVar(&o.agentImage, "agent-image", "", "Container image of the node agent that --manage-agents installs.")
	f.StringVar(&o.extensionConfigName, "extension-config-name", "", "Name of the ExtensionConfig that registers these hooks; the single-node control-plane path and the in-place-only guard then read its spec.settings (disableInPlaceUpdates) as Cluster API passes them to the hooks (needs get on runtime.cluster.x-k8s.io extensionconfigs), and the guard judges a ClusterClass's chained upgrades by its GenerateUpgradePlan handler of that name. Empty: no settings, no chained-upgrade preview in the guard.")
	f.IntVarP(&o.verbosity, "v", "v", 0, "Log verbosity (0 or 1).")
	return cmd
}

// extensionGCPercent is the extension's GOGC unless the environment sets GOGC. Its
// heap is mostly long-lived informer caches and a hook costs it about a millisecond
// of CPU, so it trades a little garbage-collection CPU for a heap goal of 1.5 times
// the live heap instead of 2 (Prometheus sets 75 for the same reason).
const extensionGCPercent = 50

// gcPercent is the GC percent to set: extensionGCPercent, unless GOGC is set (then
// the runtime has applied it already).
func gcPercent(lookupEnv func(string) (string, bool)) (int, bool) {
	if _, set := lookupEnv("GOGC"); set {
		return 0, false
	}
	return extensionGCPercent, true
}

// runExtension builds the manager and the hook server and runs them until ctx ends.
func runExtension(ctx context.Context, o extensionOptions) error {
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.verbosity)))
	// controller-runtime and CAPI's runtime server log through the process-wide
	// logger; this is the one place it is set.
	ctrl.SetLogger(logger)
	log := logger.WithName("extension")

	if percent, ok := gcPercent(os.LookupEnv); ok {
		debug.SetGCPercent(percent)
		log.V(1).Info("Garbage collection target set", "GOGC", percent)
	}

	pol, err := cli.LoadPolicy(o.policyFile)
	if err != nil {
		return err
	}
	restConfig, err := loadRESTConfig(o.kubeconfig)
	if err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("build scheme: %w", err)
		}
	}
	metricsOpts := metricsserver.Options{BindAddress: o.diagnosticsAddress, SecureServing: !o.insecureDiagnostics}
	if !o.insecureDiagnostics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	// HTTP/2 stays off on every listener (CVE-2023-44487, "rapid reset"), as in
	// upstream Cluster API's managers.
	http1Only := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"}; c.MinVersion = tls.VersionTLS12 }
	metricsOpts.TLSOpts = []func(*tls.Config){http1Only}
	mgr, err := ctrl.NewManager(restConfig, managerOptions(o, scheme, metricsOpts))
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	metrics, err := extension.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	updateMetrics, err := coordinator.NewPrometheusMetrics(ctrlmetrics.Registry, coordinator.MetricsOptions{})
	if err != nil {
		return err
	}

	// The coordinator writes, and decides every answer but "in progress", through an
	// uncached client; its steady-state calls answer from informers (caches, scoped
	// by managerCacheOptions) and the kubeconfig of a workload cluster is re-read only
	// when its Secret's resourceVersion changes.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("create management client: %w", err)
	}
	caches, secrets := coordinatorCaches(mgr.GetCache(), direct, scheme)
	clusters, err := coordinator.NewKubeconfigClusters(secrets, scheme, 4*time.Second)
	if err != nil {
		return fmt.Errorf("create workload cluster clients: %w", err)
	}
	updater, err := coordinator.New(coordinator.Options{
		Client:              direct,
		Clusters:            clusters,
		Caches:              caches,
		OSImages:            coordinator.OSImagesFromPolicy(pol),
		Binaries:            pol,
		Preflight:           pol,
		Gates:               pol,
		NodeConfig:          pol,
		DeclaredOSImages:    pol,
		RegistryCredentials: pol,
		Deadlines:           coordinator.DeadlinesFromPolicy(pol.Deadlines()),
		PoolDeadlines:       pol,
		Fleet:               pol,
		FleetMetrics:        metrics,
		Metrics:             updateMetrics,
		Recorder:            mgr.GetEventRecorder("capi-inplace"),
		Drain:               coordinator.DrainOptionsFromPolicy(pol.Drain()),
		ManageAgents:        o.manageAgents,
		AgentImage:          o.agentImage,
	})
	if err != nil {
		return fmt.Errorf("create coordinator: %w", err)
	}
	// Stops only once the reports written after a done answer are over.
	if err := mgr.Add(updater); err != nil {
		return fmt.Errorf("add coordinator: %w", err)
	}

	handlers, err := extension.NewHandlers(extension.Options{Policy: pol, Updater: updater, Metrics: metrics, UpgradePlans: extension.NewUpgradePlanReader(direct), Secrets: secrets})
	if err != nil {
		return err
	}
	hookServer, err := extension.NewServer(handlers, extension.ServerOptions{
		Host:    o.webhookHost,
		Port:    o.webhookPort,
		CertDir: o.webhookCertDir,
		TLSOpts: []func(*tls.Config){http1Only},
	})
	if err != nil {
		return err
	}
	// The single-node control-plane path: its hold webhook is served on
	// --admission-port (config/default: 9444, so that the NetworkPolicy can admit the
	// API server there while only Cluster API's controllers reach the hooks) or on the
	// hook server, and its controller drives held KubeadmControlPlanes through the
	// same coordinator.
	var admission singlenode.WebhookRegistry = hookServer
	if o.admissionPort != 0 {
		// Its own port, with request budgets of its own within the process's: the
		// port is open to every pod, and none of its clients may delay a hook call.
		admissionServer, err := extension.NewAdmissionServer(hookServer, extension.ServerOptions{
			Host: o.webhookHost, Port: o.admissionPort, CertDir: o.webhookCertDir, TLSOpts: []func(*tls.Config){http1Only},
		})
		if err != nil {
			return err
		}
		if err := mgr.Add(admissionServer); err != nil {
			return fmt.Errorf("add admission webhook server to manager: %w", err)
		}
		if err := mgr.AddReadyzCheck("admission", admissionServer.StartedChecker()); err != nil {
			return fmt.Errorf("add readiness check: %w", err)
		}
		admission = admissionServer
	}
	// The hooks' planner and policy decide for the single-node path too.
	plans, err := planner.New(pol)
	if err != nil {
		return fmt.Errorf("single-node control-plane planner: %w", err)
	}
	if err := singlenode.SetupWithManager(mgr, singlenode.Options{
		Updater: updater, Planner: plans, Workloads: workloadClients{clusters}, WebhookServer: admission,
		ExtensionConfigName: o.extensionConfigName,
	}); err != nil {
		return fmt.Errorf("set up single-node control-plane path: %w", err)
	}
	// The in-place-only guard, on the same admission server as the hold webhook. It
	// reads through the manager's cache (typed and unstructured): it answers every
	// spec write of an opted-in Cluster's objects within its latency budget. It
	// counts the Secrets a write's KubeadmConfigs reference through the hooks' own
	// bounded Secret cache, by the hooks' rule.
	gopts := guardOptions(o)
	gopts.Secrets = secrets
	if err := setupGuard(mgr, admission, pol, gopts); err != nil {
		return err
	}
	// Its registration follows the infrastructure providers installed (leader-elected).
	if err := (&guard.Registrar{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the guard's registration: %w", err)
	}
	// FleetRollouts (internal/fleetrollout): leader-elected, as the single-node controller.
	rolloutMetrics, err := fleetrollout.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	if err := fleetrollout.SetupWithManager(mgr, fleetrollout.Options{Metrics: rolloutMetrics}); err != nil {
		return fmt.Errorf("set up fleet rollouts: %w", err)
	}
	// The hook server needs no leader election: every replica answers hooks.
	if err := mgr.Add(hookServer); err != nil {
		return fmt.Errorf("add hook server to manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("hooks", hookServer.StartedChecker()); err != nil {
		return fmt.Errorf("add readiness check: %w", err)
	}

	log.Info("Starting extension", "webhookPort", o.webhookPort, "certDir", o.webhookCertDir,
		"policyFile", o.policyFile, "manageAgents", o.manageAgents)
	// Start returns once ctx ends (SIGTERM, SIGINT), the runnables stopped (at most
	// shutdownTimeout) and the leader released its Lease (managerOptions). Nothing
	// runs after it: this returns and main exits at once, which is what makes the
	// release safe (controller-runtime's LeaderElectionReleaseOnCancel contract: a
	// process still working after it would be a second writer beside the new leader).
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// leaderElectionID names the Lease the replicas elect the single-node
// controller's leader with (in the pod's namespace or --leader-elect-namespace).
const leaderElectionID = "capi-inplace-extension"

// shutdownTimeout bounds how long the manager waits, once ctx ends, for its
// runnables (hook calls and reconciles in flight) before it releases the Lease
// and Start returns: below the pod's terminationGracePeriodSeconds (30 s in
// config/manager, checked by TestShutdownFitsTheGracePeriod), so that the release
// happens before the kubelet's SIGKILL.
// A cut hook call is retried by Cluster API; every step is idempotent.
const shutdownTimeout = 20 * time.Second

// managerOptions are the controller-runtime manager's options of `capi-inplace
// extension`. A leader that stops (SIGTERM: a rollout, a drain, a scale-down)
// releases its Lease (LeaderElectionReleaseOnCancel), so the other replica
// leads within its next retry (2 s) instead of after the lease expires (15 s);
// a SIGKILLed or partitioned leader still holds it until expiry.
func managerOptions(o extensionOptions, scheme *runtime.Scheme, metrics metricsserver.Options) ctrl.Options {
	shutdown := shutdownTimeout
	return ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metrics,
		HealthProbeBindAddress:        o.healthAddr,
		PprofBindAddress:              o.profilerAddress,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
		Cache:                         managerCacheOptions(),
	}
}

func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	// As ctrl.GetConfig does for $KUBECONFIG: leave throttling to the API server's
	// priority and fairness rather than client-go's default of 5 requests/s.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = -1, -1
	}
	return cfg, nil
}

// workloadClients hands the single-node controller the coordinator's workload
// cluster clients (one cache of kubeadm-config readers and node writers per cluster).
type workloadClients struct{ c coordinator.WorkloadClusters }

func (w workloadClients) WorkloadClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error) {
	wc, err := w.c.Get(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return wc.Client, nil
}

// guardOptions are the guard's options that come from the flags: the
// ExtensionConfig is the one --extension-config-name names, as for the
// single-node path.
func guardOptions(o extensionOptions) guard.Options {
	return guard.Options{ExtensionConfig: o.extensionConfigName}
}

// setupGuard registers the in-place-only guard (internal/guard) on registry, with
// opts (guardOptions) completed by the manager's readers, the policy's planner,
// metrics and an Event recorder.
func setupGuard(mgr ctrl.Manager, registry guard.WebhookRegistry, pol *policy.Policy, opts guard.Options) error {
	for _, add := range []func(*runtime.Scheme) error{apiextensionsv1.AddToScheme, runtimev1.AddToScheme} {
		if err := add(mgr.GetScheme()); err != nil {
			return fmt.Errorf("guard: register types: %w", err)
		}
	}
	// Refusals for an object not found are checked again without the cache, and a
	// kind whose informer has not synced yet is read live.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("guard: client: %w", err)
	}
	// A client.Client, typed and unstructured reads through OrLive: Cluster API's
	// desired-state generator, which the guard runs for topology writes, takes one.
	cached, err := client.New(mgr.GetConfig(), client.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Cache: &client.CacheOptions{Reader: cachedread.OrLive{Cache: mgr.GetCache(), Live: direct}, Unstructured: true},
	})
	if err != nil {
		return fmt.Errorf("guard: client: %w", err)
	}
	pl, err := planner.New(pol)
	if err != nil {
		return fmt.Errorf("guard: planner: %w", err)
	}
	gm, err := guard.NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	opts.Reader, opts.LiveReader, opts.Planner, opts.Policy, opts.Metrics = cached, direct, pl, pol, gm
	opts.Recorder = mgr.GetEventRecorder("capi-inplace-guard")
	return guard.Register(registry, opts)
}
