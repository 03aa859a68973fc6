package agentcmd

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2/textlogger"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// rescueHostRoot is where the rescue static pod mounts the host's root.
const rescueHostRoot = "/host"

// restoreInFlight is the journal's key of a rollback's etcd restore.
var restoreInFlight = state.Action{Name: state.ActRestoreEtcd, Rollback: true}.Key()

// rescuePod is the static pod the agent keeps in place while a restore has the
// API server stopped (kube.RescueManifest); nil without the agent's image.
func rescuePod(image string) *kube.RescuePod {
	if image == "" {
		return nil
	}
	return &kube.RescuePod{Image: image, Args: []string{"rescue", "--host-root=" + rescueHostRoot}, HostRoot: rescueHostRoot}
}

func newRescueCommand() *cobra.Command {
	var hostRoot string
	cmd := &cobra.Command{
		Use:   "rescue",
		Short: "Finish an etcd restore that a reboot interrupted (the rescue static pod runs it)",
		Long: `The agent keeps a static pod running this command on a control-plane node while an
etcd restore has the node's API server and etcd stopped: after a power cut in that
window the kubelet starts it without an API server. It waits for the journal's lock
(held by a live agent), repeats the restore the journal has in flight, which starts
etcd and the API server again, and removes its own manifest. With nothing in flight
it only removes the manifest. The agent carries on from its journal once the API
server is back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Rescue(cmd.Context(), hostRoot)
		},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.Flags().StringVar(&hostRoot, "host-root", rescueHostRoot, "The host's root directory as seen by the rescue pod.")
	return cmd
}

// Rescue finishes the etcd restore the journal under hostRoot has in flight, once
// it holds the journal's lock, and removes the rescue static pod.
func Rescue(ctx context.Context, hostRoot string) error {
	log := textlogger.NewLogger(textlogger.NewConfig()).WithName("rescue")
	root, err := filepath.Abs(hostRoot)
	if err != nil {
		return fmt.Errorf("--host-root: %w", err)
	}
	host := &kube.Host{Root: root, Runner: agent.HostRunner{Root: root, Exec: backend.ExecRunner{}}, Etcd: etcd.KubeadmLocal(root)}
	dir, release, err := host.PinDir(kube.WorkDir, 0o700)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	defer release()
	jr, err := journal.NewFile(dir)
	if err != nil {
		return err
	}
	unlock, err := claimHost(ctx, dir, host, jr, func() { log.Info("The agent holds the journal: waiting for it to finish or go") })
	if err != nil {
		return err
	}
	defer unlock()
	e, err := jr.Load()
	if err != nil {
		return err
	}
	if e.InFlight != restoreInFlight {
		log.Info("Nothing to rescue: no etcd restore in flight", "inFlight", e.InFlight)
		return nil
	}
	log.Info("Finishing the etcd restore in flight", "plan", e.Key, "attempt", e.Attempt)
	if err := host.RestoreEtcd(ctx, e.Attempt); err != nil {
		return fmt.Errorf("finish the etcd restore of attempt %s: %w", e.Attempt, err)
	}
	log.Info("etcd and the API server are back; the agent carries on from its journal")
	return nil
}

// claimHost takes the journal's lock (waiting is called if another process holds
// it) and removes a rescue pod no restore needs: with no restore in flight, one
// the agent's removal left, or the rescue's own once it has nothing to do. The
// agent holds the claim for its life, the rescue pod while it finishes a restore.
func claimHost(ctx context.Context, dir string, host *kube.Host, jr journal.Journal, waiting func()) (release func(), err error) {
	release, err = journal.Lock(ctx, dir, waiting)
	if err != nil {
		return nil, err
	}
	// A journal that cannot be read is the agent's to report; the pod stays.
	if e, err := jr.Load(); err == nil && e.InFlight != restoreInFlight {
		if err := host.DisarmRescue(); err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}
