package executor

import (
	"context"
	"encoding/json"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Host is the Kubernetes layer of the node the executor changes: files, users,
// NTP, the kubelet, kubeadm, binaries and the local etcd member, with backups for
// rollback (kube.Host on a real node). The simulated host injects its faults by
// wrapping it, as controller-runtime's interceptor wraps a client.
type Host interface {
	BackupSet(p *protocol.NodePlan) []string
	Backup(ctx context.Context, attempt string, paths []string) error
	Restore(ctx context.Context, attempt string) error
	RestoreWithImageRollback(ctx context.Context, attempt string) error
	WriteFiles(ctx context.Context, files []protocol.File) error
	ApplyUsers(ctx context.Context, raw json.RawMessage) error
	ApplyNTP(ctx context.Context, raw json.RawMessage) error
	KubeletFlags(ctx context.Context, args []protocol.Arg) error
	ControlPlaneConfig(ctx context.Context, plan *protocol.NodePlan) error
	InstallKubeadm(ctx context.Context, k protocol.KubernetesPlan) error
	InstallKubelet(ctx context.Context, k protocol.KubernetesPlan) error
	KubeadmUpgrade(ctx context.Context, k protocol.KubernetesPlan) error
	RestartKubelet(ctx context.Context) error
	// EtcdSnapshot snapshots the local etcd member and returns the member count.
	EtcdSnapshot(ctx context.Context, attempt string) (int, error)
	RestoreEtcd(ctx context.Context, attempt string) error
	// CollectAttempts removes the work directories of attempts other than keep.
	CollectAttempts(keep ...string) error
	// ArmRescue puts the rescue static pod of attempt in place (a no-op when it
	// is, or on a host without one); DisarmRescue removes it (state.RescueWanted).
	ArmRescue(attempt string) error
	DisarmRescue() error
}

type actionKey struct{}

// WithAction names the action (its key) that calls with the returned context
// belong to; the executor sets it on every dependency call for an action.
func WithAction(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, actionKey{}, key)
}

// ActionFrom returns the key of the action (state.Action.Key: "write-files",
// "rollback/restore-files") on whose behalf the executor calls a dependency with
// ctx; false outside an action (e.g. the OS-image check before a plan starts).
// It lets a wrapper of the executor's dependencies (the simulated host's fault
// injection) tell actions apart without hooks in the executor.
func ActionFrom(ctx context.Context) (string, bool) {
	key, ok := ctx.Value(actionKey{}).(string)
	return key, ok
}
