package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/agentmetrics"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Simulation is a simulated host: the edges of a node that `--simulate` replaces.
// Every field is required.
type Simulation struct {
	Runner   backend.Runner
	Rebooter executor.Rebooter
	Binaries kube.BinarySource
	Etcd     etcd.Member
	// Journal, Kube, Backend and Gates wrap the agent's own journal, Kubernetes
	// layer, OS backends and gate runner: the simulated host injects its action
	// and gate faults there (as controller-runtime's interceptor wraps a client),
	// the executor and the gates have no hooks for it. ctx ends a pause.
	Journal func(ctx context.Context, next journal.Journal) journal.Journal
	Kube    func(next executor.Host) executor.Host
	Backend func(next backend.Backend) backend.Backend
	Gates   func(next executor.GateRunner) executor.GateRunner
	// Backends are the OS backends of the simulated host, by name.
	Backends map[string]backend.Backend
	// WrapTransport wraps the agent's connection to its API server (the simulated
	// host injects API outages there).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Start is called once the workload cluster client exists, before the agent
	// runs. It returns when the host is ready; what it starts (the simulated
	// kubelet) runs until ctx ends.
	Start func(ctx context.Context, client kubernetes.Interface) error
}

// Simulator builds the simulated host of node nodeName inside the directory root.
type Simulator func(root, nodeName string, log logr.Logger) (*Simulation, error)

// Options are the agent's flags.
type Options struct {
	NodeName    string
	Kubeconfig  string
	HostRoot    string
	StateDir    string
	Simulate    bool
	GateTimeout time.Duration
	NodeConfig  string
	HealthAddr  string
	MetricsAddr string
	Verbosity   int
	// Version is logged at start.
	Version string
	// QuorumHoldTimeout bounds how long a control-plane plan is held before the
	// node is touched while the etcd cluster is not whole.
	QuorumHoldTimeout time.Duration
	// Image is the agent's own image, which the rescue static pod runs
	// (kube.RescueManifest); empty means no rescue pod.
	Image string
}

// NewCommand returns the agent command named use. With a nil sim (product
// binaries) it has no --simulate flag.
func NewCommand(use, version string, sim Simulator) *cobra.Command {
	o := Options{Version: version}
	long := `The agent runs on every node of a workload cluster (the extension installs it as a
DaemonSet). It watches its own Node and its plan Secret, applies the desired plan
step by step with a crash-safe journal on the host disk, checks health gates,
rolls back on failure, and reports progress on its Node's annotations.`
	if sim != nil {
		long += `

With --simulate, the host is the directory --host-root: kubeadm, the kubelet,
systemctl, etcd and reboots are emulated there, and fault files under
<host-root>/.sim inject failures (see docs/agent-node.md).`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: "Run the node agent: apply this node's plan (kubeadm, files, OS image) with a journal, gates and rollback",
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Run(cmd.Context(), o, sim)
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := cmd.Flags()
	f.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default $NODE_NAME).")
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to the workload cluster's kubeconfig; empty means the in-cluster config.")
	f.StringVar(&o.HostRoot, "host-root", "/host", "The host's root directory as seen by the agent.")
	f.StringVar(&o.StateDir, "state-dir", "", "Directory of the journal (default <host-root>/var/lib/capi-inplace).")
	if sim != nil {
		f.BoolVar(&o.Simulate, "simulate", false, "Emulate the host inside --host-root (tests, demos, CAPI's in-memory clusters).")
	}
	f.DurationVar(&o.GateTimeout, "gate-timeout", protocol.DefaultGatePassWithin, "How long each health gate may take to pass before the update is rolled back.")
	f.DurationVar(&o.QuorumHoldTimeout, "etcd-quorum-hold-timeout", gate.DefaultHoldTimeout,
		"How long a control-plane update waits, before touching the node, for the etcd cluster to be whole; then the update fails with nothing changed (reason EtcdQuorumTimeout).")
	f.StringVar(&o.NodeConfig, "node-config", agent.NodeConfigPath, "Host path (under --host-root) of the node configuration: the service manager (see docs/agent-node.md); a missing file means systemd.")
	f.StringVar(&o.HealthAddr, "health-addr", "127.0.0.1:9441", "Address of the health probe (/healthz); \"0\" disables it. Loopback by default: the agent runs in the host network, where every pod of the node could reach another address.")
	f.StringVar(&o.MetricsAddr, "metrics-addr", "0", "Address of the Prometheus metrics (/metrics, docs/metrics.md), e.g. :9442; \"0\" disables them.")
	f.StringVar(&o.Image, "image", os.Getenv("AGENT_IMAGE"), "The agent's own image (default $AGENT_IMAGE), run by the rescue static pod that rolls a control plane back whose API server does not come back after a reboot (see the rescue command); empty means none.")
	f.IntVarP(&o.Verbosity, "v", "v", 0, "Log verbosity (0 or 1).")
	return cmd
}

// Run runs the agent until ctx ends. sim is used only with o.Simulate.
func Run(ctx context.Context, o Options, sim Simulator) error {
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity))).WithName("agent")
	if o.NodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if o.Simulate && sim == nil {
		return errors.New("--simulate: this binary has no simulated host")
	}
	root, err := filepath.Abs(o.HostRoot)
	if err != nil {
		return fmt.Errorf("--host-root: %w", err)
	}
	stateDir := o.StateDir
	if stateDir == "" {
		stateDir = filepath.Join(root, kube.WorkDir)
	}
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "capi-inplace-agent/" + o.NodeName

	nodeCfg, err := agent.LoadNodeConfig(root, o.NodeConfig)
	if err != nil {
		return err
	}
	var s *Simulation
	if o.Simulate {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("create simulated host %s: %w", root, err)
		}
		if s, err = sim(root, o.NodeName, log.WithName("simhost")); err != nil {
			return fmt.Errorf("simulated host %s: %w", root, err)
		}
		cfg.WrapTransport = s.WrapTransport
	}
	var (
		runner   backend.Runner = agent.HostRunner{Root: root, Exec: backend.ExecRunner{}}
		rebooter executor.Rebooter
		binaries kube.BinarySource
		// etcd through its Go libraries: a kubeadm host has no etcdctl or etcdutl.
		member etcd.Member = etcd.KubeadmLocal(root)
	)
	if s != nil {
		runner, rebooter, binaries, member = s.Runner, s.Rebooter, s.Binaries, s.Etcd
	}
	services, err := service.New(nodeCfg.ServiceManager, runner)
	if err != nil {
		return fmt.Errorf("node configuration %s: %w", o.NodeConfig, err)
	}
	if rebooter == nil {
		rebooter = agent.Rebooter{Services: services}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("workload cluster client: %w", err)
	}
	if s != nil {
		if err := s.Start(ctx, client); err != nil {
			return err
		}
	}

	journalDir := o.StateDir
	if journalDir == "" {
		// On the host: resolved inside the host root and held for the agent's
		// life, so a symlink on the way cannot put the journal and the key into
		// the container's writable layer (lost with the pod) or elsewhere.
		dir, release, err := (&kube.Host{Root: root}).PinDir(kube.WorkDir, 0o700)
		if err != nil {
			return fmt.Errorf("state directory %s: %w", stateDir, err)
		}
		defer release()
		journalDir = dir
	}
	jr, err := journal.NewFile(journalDir)
	if err != nil {
		return err
	}
	kubeHost := &kube.Host{Root: root, Runner: runner, Binaries: binaries, Services: services, Etcd: member}
	if !o.Simulate {
		kubeHost.Rescue = rescuePod(o.Image, o.NodeConfig)
	}
	// One process acts on the host from the journal: this agent, or before it
	// the rescue pod acting on the journal after a reboot (see Rescue).
	unlock, err := claimHost(ctx, journalDir, kubeHost, jr, func() { log.Info("The rescue pod holds the journal: waiting for it to finish") })
	if err != nil {
		return err
	}
	defer unlock()
	// The node key lives on the host's disk with the journal and never leaves it.
	nodeKey, err := agent.LoadOrCreateNodeKey(journalDir)
	if err != nil {
		return err
	}
	var backends map[string]backend.Backend
	if s != nil {
		backends = withNone(s.Backends)
	} else {
		var release func()
		backends, release = hostBackends(ctx, root, runner)
		defer release()
	}
	reporter := &agent.Reporter{Client: client, NodeName: o.NodeName, Log: log}
	am, err := agentmetrics.New(time.Now)
	if err != nil {
		return err
	}
	nodeReader := agent.NodeReader{Client: client, NodeName: o.NodeName}
	x := &executor.Executor{
		Journal: am.CountedJournal(jr),
		Kube:    kubeHost,
		Gates: &gate.Checker{Nodes: nodeReader, Pods: nodeReader, Etcd: kubeHost, Runner: runner, Progress: reporter.GateStarted, Holds: &gate.HoldClock{Timeout: o.QuorumHoldTimeout, Record: agent.HoldFile{Path: filepath.Join(journalDir, agent.HoldFileName)}},
			Timeout: o.GateTimeout, Interval: 2 * time.Second, MaxInterval: 5 * time.Second, CommandTimeout: protocol.DefaultGateRunTimeout},
		Backends: lookupBackend(backends),
		Rebooter: rebooter,
		Reporter: am.ObservedReporter(reporter),
		Now:      time.Now,
		Log:      log,
	}
	if s != nil {
		x.Journal, x.Kube, x.Gates = s.Journal(ctx, x.Journal), s.Kube(x.Kube), s.Gates(x.Gates)
		for name, b := range backends {
			backends[name] = s.Backend(b)
		}
	}
	a := &agent.Agent{NodeName: o.NodeName, Client: client, Executor: x, Host: kubeHost, Reporter: reporter, Backends: backendNames(backends), Key: nodeKey, Log: log}

	if o.HealthAddr != "0" && o.HealthAddr != "" {
		stop, err := serveHealth(o.HealthAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.MetricsAddr != "0" && o.MetricsAddr != "" {
		stop, err := serveMetrics(o.MetricsAddr, am.Handler(), log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.Info("Agent starting", "version", o.Version, "node", o.NodeName, "hostRoot", root, "stateDir", stateDir, "simulate", o.Simulate,
		"serviceManager", serviceManagerType(nodeCfg.ServiceManager), "backends", backendNames(backends), "key", protocol.KeyID(nodeKey.PublicKey()))
	return a.Run(ctx)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config (pass --kubeconfig outside a pod): %w", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	// The agent writes a few status patches per step; client-go's default of
	// 5 requests/s spaced back-to-back plans 200 ms apart (measured in bench/).
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 20, 40
	}
	return cfg, nil
}

func serviceManagerType(c service.Config) string {
	if c.Type == "" {
		return service.TypeSystemd
	}
	return c.Type
}
