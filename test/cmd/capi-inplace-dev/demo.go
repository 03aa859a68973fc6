package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/capi-inplace/capi-inplace/internal/demo"
	"github.com/capi-inplace/capi-inplace/test/realcapi"
)

func newDemoCommand() *cobra.Command {
	o := demo.Options{}
	var onRealNodes bool
	nodes := realcapi.NodesOptions{DockerHost: os.Getenv("DOCKER_HOST")}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole in-place upgrade on this machine, with live progress",
		Long: `demo starts a local upstream Cluster API v1.14.2 management cluster (kube-apiserver and
etcd, the core, KubeadmControlPlane, kubeadm bootstrap and in-memory infrastructure
managers as processes), the extension (bin/capi-inplace) over HTTPS registered with an
ExtensionConfig, and a ClusterClass cluster of one control-plane node (opted into the
single-node control-plane path) and two workers, each node with a simulated agent
(this binary's agent --simulate).

It then moves spec.topology.version one minor up and changes a file in one update, shows
each machine's step, drain state and elapsed time live, and ends with a summary: the
same machines (names and UIDs) before and after, no Machine created, every node at the
new kubelet version, the new file on every host, per-node durations and the total time.
It exits 1 when any check fails. Ctrl-C tears everything down.

Only one local stack can run per machine (upstream's in-memory provider binds port 19000).

With --real (make demo-real, root) the nodes are real: containers of the lane's Docker
engine with systemd, containerd, kubeadm and the kubelet, made by the Dev provider's
Docker backend, whose agents the extension installs as in production
(docs/real-capi.md); the releases are the real-node lane's.`,
		Example: `  make demo
  bin/capi-inplace-dev demo --keep
  make demo-real`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out = cmd.OutOrStdout()
			o.TTY = isTerminal(o.Out)
			if o.TTY {
				if w, _, err := term.GetSize(int(o.Out.(*os.File).Fd())); err == nil {
					o.Width = w
				}
			}
			if o.BinDir == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("demo: find bin dir: %w", err)
				}
				o.BinDir = filepath.Dir(exe)
			}
			if onRealNodes {
				root, err := filepath.Abs(filepath.Join(o.BinDir, ".."))
				if err != nil {
					return err
				}
				if !cmd.Flags().Changed("timeout") {
					o.Timeout = 40 * time.Minute
				}
				nodes.Root = root
				nodes.Dir = filepath.Join(root, "_artifacts", "demo-real-"+time.Now().UTC().Format("20060102-150405"))
				if o.ArtifactsDir == "" {
					o.ArtifactsDir = nodes.Dir
				}
				n, err := realcapi.NewNodes(cmd.Context(), nodes)
				if err != nil {
					return fmt.Errorf("demo: %w", err)
				}
				o.Nodes = n
			}
			// A failed check returns demo.ErrChecksFailed: exit code 1, like any error.
			return demo.Run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Keep, "keep", false, "keep the stack running after the summary and print how to reach it (Ctrl-C to stop)")
	f.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "give up (and tear down) after this long")
	f.StringVar(&o.ArtifactsDir, "artifacts", "", "directory for every process's log (default _artifacts/demo-<time>)")
	f.StringVar(&o.BinDir, "bin-dir", "", "directory of kube-apiserver, etcd, the capi-* managers, capi-inplace and capi-inplace-dev (default: this binary's directory)")
	// Tests wait for another local stack to end instead of failing fast.
	f.DurationVar(&o.PortWait, "port-wait", 0, "wait this long for port 19000 when another local stack holds it (default: fail at once)")
	_ = f.MarkHidden("port-wait")
	f.BoolVar(&onRealNodes, "real", false, "real kubeadm nodes in the lane's Docker engine instead of simulated ones (make demo-real sets up the engine and images)")
	f.StringVar(&nodes.NodeImage, "node-image", "", "with --real: the node image (hack/realcapi/images.sh)")
	f.StringVar(&nodes.AgentImage, "agent-image", "", "with --real: the agent image reference (hack/realnode/agent-image.sh)")
	f.StringVar(&nodes.AgentImageTar, "agent-image-tar", "", "with --real: the agent image's tarball")
	f.StringVar(&nodes.DockerHost, "docker-host", nodes.DockerHost, "with --real: the lane's Docker engine (default $DOCKER_HOST)")
	return cmd
}
