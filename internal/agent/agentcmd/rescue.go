package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2/textlogger"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/rescue"
	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// rescueHostRoot is where the rescue static pod mounts the host's root.
const rescueHostRoot = "/host"

// DefaultAPIServerDeadline is how long, by default, the rescue pod waits for
// the node's API server to answer ready before it rolls an update in flight
// back. After a reboot a kubeadm control plane's API server takes one to two
// minutes (the kubelet starts, then etcd, then the API server, which waits for
// etcd); a slow disk or a large etcd doubles that. Ten minutes leaves room for
// that and stays well inside the coordinator's rebooting deadline (30 minutes).
const DefaultAPIServerDeadline = 10 * time.Minute

// rescueProbeInterval is the pause between two probes of the API server.
const rescueProbeInterval = 2 * time.Second

// rescuePod is the static pod the agent keeps in place on a control plane while
// state.RescueWanted says so (kube.RescueManifest); nil without the agent's
// image. nodeConfig is the agent's --node-config (the service manager the
// rollback restarts the kubelet and reboots with).
func rescuePod(image, nodeConfig string) *kube.RescuePod {
	if image == "" {
		return nil
	}
	return &kube.RescuePod{Image: image, HostRoot: rescueHostRoot,
		Args: []string{"rescue", "--host-root=" + rescueHostRoot, "--node-config=" + nodeConfig}}
}

// RescueOptions are the rescue command's flags.
type RescueOptions struct {
	HostRoot   string
	NodeConfig string
	// APIServerDeadline is how long the node's API server has to answer ready,
	// from when the rescue holds the journal, before an update in flight is
	// rolled back.
	APIServerDeadline time.Duration
	Verbosity         int

	// probeInterval is the pause between two probes; zero means
	// rescueProbeInterval (tests shorten it).
	probeInterval time.Duration
}

func newRescueCommand() *cobra.Command {
	o := RescueOptions{}
	cmd := &cobra.Command{
		Use:   "rescue",
		Short: "Roll a control plane back whose API server did not come back after a reboot (the rescue static pod runs it)",
		Long: `The agent keeps a static pod running this command on a control-plane node from
before the first step that changes what the node boots into until the update
ends: after a reboot the kubelet starts it even when the node's API server
cannot start, when no DaemonSet pod (so no agent) starts. It waits for the
journal's lock (held by a live agent), then:

- no update in flight that needs it: removes its own manifest and exits;
- a rollback in flight (an etcd restore included): finishes it from the journal,
  removes its own manifest and exits;
- an update in flight: probes the node's own API server (/readyz on its secure
  port); when it answers ready, leaves the journal to the agent and stands by
  until the agent removes the pod; when it has not by --api-server-deadline,
  rolls the update back from the journal, removes its own manifest and exits.

It never writes to an API server: the agent, back with its API server, reports
the outcome from the journal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Rescue(cmd.Context(), o)
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	f := cmd.Flags()
	f.StringVar(&o.HostRoot, "host-root", rescueHostRoot, "The host's root directory as seen by the rescue pod.")
	f.StringVar(&o.NodeConfig, "node-config", agent.NodeConfigPath, "Host path (under --host-root) of the node configuration: the service manager (see docs/agent-node.md); a missing file means systemd.")
	f.DurationVar(&o.APIServerDeadline, "api-server-deadline", DefaultAPIServerDeadline,
		"How long the node's API server has to answer ready, from when the rescue holds the journal, before an update in flight is rolled back.")
	f.IntVarP(&o.Verbosity, "v", "v", 0, "Log verbosity (0 or 1).")
	return cmd
}

// errStoodBy is the rescue's exit while it stands by: not a success, so that
// the kubelet (restartPolicy OnFailure) starts it again after a reboot.
var errStoodBy = errors.New("the rescue pod stood by for the agent until it was stopped")

// Rescue acts on the journal under o.HostRoot once it holds the journal's lock
// (rescue.Decide): it finishes a rollback in flight, rolls back an update in
// flight whose API server does not answer ready by the deadline, or leaves the
// journal to the agent. It removes the rescue static pod when nothing more is
// left for it; while it leaves the journal to the agent it keeps running, until
// ctx ends: a container that exited 0 is not started again by the kubelet after
// a reboot, and the pod must run then.
func Rescue(ctx context.Context, o RescueOptions) error {
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.Verbosity))).WithName("rescue")
	root, err := filepath.Abs(o.HostRoot)
	if err != nil {
		return fmt.Errorf("--host-root: %w", err)
	}
	nodeCfg, err := agent.LoadNodeConfig(root, o.NodeConfig)
	if err != nil {
		return err
	}
	runner := agent.HostRunner{Root: root, Exec: backend.ExecRunner{}}
	services, err := service.New(nodeCfg.ServiceManager, runner)
	if err != nil {
		return fmt.Errorf("node configuration %s: %w", o.NodeConfig, err)
	}
	backends, release := hostBackends(ctx, root, runner)
	defer release()
	return rescueNode{
		Host:     &kube.Host{Root: root, Runner: runner, Services: services, Etcd: etcd.KubeadmLocal(root)},
		Backends: backends,
		Rebooter: agent.Rebooter{Services: services},
	}.rescue(ctx, o, log)
}

// rescueNode is the node as the rescue acts on it: the agent's Kubernetes layer
// (its root holds the journal), OS backends and reboots, and no API client.
type rescueNode struct {
	Host     *kube.Host
	Backends map[string]backend.Backend
	Rebooter executor.Rebooter
}

// rescue is Rescue on the node n.
func (n rescueNode) rescue(ctx context.Context, o RescueOptions, log logr.Logger) error {
	if o.APIServerDeadline <= 0 {
		return fmt.Errorf("--api-server-deadline must be positive, not %s", o.APIServerDeadline)
	}
	dir, release, err := n.Host.PinDir(kube.WorkDir, 0o700)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	defer release()
	jr, err := journal.NewFile(dir)
	if err != nil {
		return err
	}
	unlock, err := claimHost(ctx, dir, n.Host, jr, func() { log.Info("The agent holds the journal: waiting for it to finish or go") })
	if err != nil {
		return err
	}
	defer unlock()
	// The agent's executor, as the rescue runs it: the same journal, Kubernetes
	// layer, OS backends and reboots. It runs rollback actions only
	// (rescue.Decide), none of which needs an API server; the gates, which do,
	// refuse rather than pass, and status reports go to the log: the agent
	// reports the outcome from the journal once its API server is back.
	x := &executor.Executor{
		Journal:  jr,
		Kube:     n.Host,
		Gates:    noGates{},
		Backends: lookupBackend(n.Backends),
		Rebooter: n.Rebooter,
		Reporter: logReporter{log: log},
		Now:      time.Now,
		Log:      log,
	}
	interval := o.probeInterval
	if interval <= 0 {
		interval = rescueProbeInterval
	}
	r := &rescue.Rescuer{Executor: x, Probe: n.Host.APIServerReady, Deadline: o.APIServerDeadline, Interval: interval, Now: time.Now, Log: log}
	verdict, st, err := r.Run(ctx)
	if err != nil {
		return err
	}
	if verdict == rescue.StandBy {
		unlock()
		log.Info("The node's API server is ready: the agent carries on from its journal; standing by", "plan", st.PlanHash, "phase", st.Phase)
		<-ctx.Done()
		return errStoodBy
	}
	if err := n.Host.DisarmRescue(); err != nil {
		return err
	}
	log.Info("Nothing more for the rescue pod; it removed itself", "plan", st.PlanHash, "phase", st.Phase)
	return nil
}

// noGates is the rescue's gate runner: it has no API server to ask.
type noGates struct{}

func (noGates) Run(context.Context, *protocol.NodePlan) error {
	return errors.New("the rescue pod runs no health gates: it has no API server")
}

// logReporter logs the statuses the rescue's executor reports.
type logReporter struct{ log logr.Logger }

func (r logReporter) Report(s protocol.NodeStatus) {
	r.log.Info("Status", "plan", s.PlanHash, "phase", s.Phase, "step", s.Step, "steps", s.Steps, "action", s.Action, "reason", s.Reason, "message", s.Message)
}

// claimHost takes the journal's lock (waiting is called if another process holds
// it) and removes a rescue pod the journal does not want (state.RescueWanted:
// no update in flight that may leave the node unable to start its API server;
// one the agent's removal left, or the rescue's own once it has nothing to do).
// The agent holds the claim for its life, the rescue pod while it acts.
func claimHost(ctx context.Context, dir string, host *kube.Host, jr journal.Journal, waiting func()) (release func(), err error) {
	release, err = journal.Lock(ctx, dir, waiting)
	if err != nil {
		return nil, err
	}
	// A journal that cannot be read is the agent's to report; the pod stays.
	e, err := jr.Load()
	if err != nil {
		return release, nil
	}
	if st, err := executor.StateOf(e); err == nil && !st.RescueWanted() {
		if err := host.DisarmRescue(); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}
