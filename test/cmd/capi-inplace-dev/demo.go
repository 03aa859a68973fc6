package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/capi-inplace/capi-inplace/internal/demo"
)

func newDemoCommand() *cobra.Command {
	o := demo.Options{}
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

Only one local stack can run per machine (upstream's in-memory provider binds port 19000).`,
		Example: `  make demo
  bin/capi-inplace-dev demo --keep`,
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
	return cmd
}
