package main

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/agent/simhost"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// agentOptions are the flags of `capi-inplace agent`.
type agentOptions struct {
	nodeName    string
	kubeconfig  string
	hostRoot    string
	stateDir    string
	simulate    bool
	gateTimeout time.Duration
	nodeConfig  string
	healthAddr  string
	verbosity   int
}

func newAgentCommand() *cobra.Command {
	o := agentOptions{}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: apply this node's plan (kubeadm, files, OS image) with a journal, gates and rollback",
		Long: `agent runs on every node of a workload cluster (the extension installs it as a
DaemonSet). It watches its own Node and its plan Secret, applies the desired plan
step by step with a crash-safe journal on the host disk, checks health gates,
rolls back on failure, and reports progress on its Node's annotations.

With --simulate, the host is the directory --host-root: kubeadm, the kubelet,
systemctl, etcd and reboots are emulated there, and fault files under
<host-root>/.sim inject failures (see docs/agent.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "Name of this node (default $NODE_NAME).")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the workload cluster's kubeconfig; empty means the in-cluster config.")
	f.StringVar(&o.hostRoot, "host-root", "/host", "The host's root directory as seen by the agent; with --simulate, the simulated host's directory.")
	f.StringVar(&o.stateDir, "state-dir", "", "Directory of the journal (default <host-root>/var/lib/capi-inplace).")
	f.BoolVar(&o.simulate, "simulate", false, "Emulate the host inside --host-root (tests, demos, CAPI's in-memory clusters).")
	f.DurationVar(&o.gateTimeout, "gate-timeout", 5*time.Minute, "How long each health gate may take to pass before the update is rolled back.")
	f.StringVar(&o.nodeConfig, "node-config", agent.NodeConfigPath, "Host path (under --host-root) of the node configuration: the service manager (see docs/agent-node.md); a missing file means systemd.")
	f.StringVar(&o.healthAddr, "health-addr", ":9441", "Address of the health probe (/healthz); \"0\" disables it.")
	f.IntVarP(&o.verbosity, "v", "v", 0, "Log verbosity (0 or 1).")
	return cmd
}

func runAgent(ctx context.Context, o agentOptions) error {
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.verbosity))).WithName("agent")
	if o.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	root, err := filepath.Abs(o.hostRoot)
	if err != nil {
		return fmt.Errorf("--host-root: %w", err)
	}
	if o.stateDir == "" {
		o.stateDir = filepath.Join(root, kube.WorkDir)
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "capi-inplace-agent/" + o.nodeName

	nodeCfg, err := agent.LoadNodeConfig(root, o.nodeConfig)
	if err != nil {
		return err
	}
	var (
		runner   backend.Runner
		services service.Manager
		rebooter executor.Rebooter
		faults   executor.Faults
		gFaults  gate.Faults
		binaries kube.BinarySource
		sim      *simhost.Host
	)
	if o.simulate {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return fmt.Errorf("create simulated host %s: %w", root, err)
		}
		sim = simhost.New(root, o.nodeName, nil, log.WithName("simhost"))
		cfg.WrapTransport = sim.WrapTransport
		runner, rebooter, faults, gFaults, binaries = sim.Runner(), sim, sim, sim, sim
	} else {
		runner = agent.HostRunner{Root: root, Exec: backend.ExecRunner{}}
	}
	if services, err = service.New(nodeCfg.ServiceManager, runner); err != nil {
		return fmt.Errorf("node configuration %s: %w", o.nodeConfig, err)
	}
	if rebooter == nil {
		rebooter = agent.Rebooter{Services: services}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("workload cluster client: %w", err)
	}
	if sim != nil {
		sim.Client = client
		if err := initSimulatedHost(ctx, sim, client, o.nodeName, log); err != nil {
			return err
		}
		go sim.RunKubelet(ctx, 2*time.Second)
	}

	jr, err := journal.NewFile(o.stateDir)
	if err != nil {
		return err
	}
	// The node key lives on the host's disk with the journal and never leaves it.
	nodeKey, err := agent.LoadOrCreateNodeKey(o.stateDir)
	if err != nil {
		return err
	}
	backends := newBackends(backendEnv{hostRoot: root, runner: runner, simulate: o.simulate})
	reporter := &agent.Reporter{Client: client, NodeName: o.nodeName, Log: log}
	kubeHost := &kube.Host{Root: root, Runner: runner, Binaries: binaries, Services: services}
	// etcd through its Go libraries: a kubeadm host has no etcdctl or etcdutl.
	kubeHost.Etcd = etcd.KubeadmLocal(root)
	if sim != nil {
		kubeHost.Etcd = sim.Etcd()
	}
	x := &executor.Executor{
		Journal: jr,
		Kube:    kubeHost,
		Gates: &gate.Checker{Nodes: agent.NodeReader{Client: client, NodeName: o.nodeName}, Etcd: kubeHost, Runner: runner,
			Timeout: o.gateTimeout, Interval: 2 * time.Second, MaxInterval: 5 * time.Second, CommandTimeout: 30 * time.Second, Faults: gFaults},
		Backends: lookupBackend(backends),
		Rebooter: rebooter,
		Reporter: reporter,
		Faults:   faults,
		Now:      time.Now,
		Log:      log,
	}
	a := &agent.Agent{NodeName: o.nodeName, Client: client, Executor: x, Reporter: reporter, Backends: backendNames(backends), Key: nodeKey, Log: log}

	if o.healthAddr != "0" && o.healthAddr != "" {
		srv := &http.Server{Addr: o.healthAddr, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("ok\n"))
		})}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "Health endpoint stopped", "address", o.healthAddr)
			}
		}()
		defer srv.Close()
	}
	log.Info("Agent starting", "node", o.nodeName, "hostRoot", root, "stateDir", o.stateDir, "simulate", o.simulate, "serviceManager", serviceManagerType(nodeCfg.ServiceManager), "backends", backendNames(backends),
		"key", protocol.KeyID(nodeKey.PublicKey()))
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

// initSimulatedHost lays out a fresh simulated host from its Node: the kubelet
// version from status.nodeInfo, the role from the control-plane label. It waits
// for the Node to exist and to report a version.
func initSimulatedHost(ctx context.Context, sim *simhost.Host, client kubernetes.Interface, nodeName string, log logr.Logger) error {
	if sim.Initialized() {
		return nil
	}
	for {
		node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && node.Status.NodeInfo.KubeletVersion != "" {
			_, cp := node.Labels["node-role.kubernetes.io/control-plane"]
			log.Info("Initialising simulated host", "node", nodeName, "kubeletVersion", node.Status.NodeInfo.KubeletVersion, "controlPlane", cp)
			return sim.Init(ctx, simhost.Options{KubernetesVersion: node.Status.NodeInfo.KubeletVersion, ControlPlane: cp})
		}
		log.Info("Waiting for the Node and its kubelet version to initialise the simulated host", "node", nodeName, "error", fmt.Sprint(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func serviceManagerType(c service.Config) string {
	if c.Type == "" {
		return service.TypeSystemd
	}
	return c.Type
}
