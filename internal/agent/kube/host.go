package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/blang/semver/v4"

	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Well-known host paths (kubeadm's defaults).
const (
	KubeadmFlagsPath = "/var/lib/kubelet/kubeadm-flags.env"
	KubeletConfig    = "/var/lib/kubelet/config.yaml"
	KubeadmBinary    = "/usr/bin/kubeadm"
	KubeletBinary    = "/usr/bin/kubelet"
	ManifestsDir     = "/etc/kubernetes/manifests"
	EtcdDataDir      = "/var/lib/etcd"
	// WorkDir holds per-plan backups and etcd snapshots on the host.
	WorkDir = "/var/lib/capi-inplace"
)

// StaticPods returns the control-plane static pods kubeadm manages.
func StaticPods() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}
}

// BinarySource puts kubeadm and kubelet of a version on the host (a package
// manager, or the simulated host). Nil means the binaries must already be there,
// e.g. delivered by the OS image.
type BinarySource interface {
	Install(ctx context.Context, version string) error
}

// Host performs Kubernetes actions on one node.
type Host struct {
	// Root is the host's root directory as seen by the agent ("/" on the host,
	// "/host" in the DaemonSet, any directory for the simulated host).
	Root   string
	Runner backend.Runner
	// Binaries installs kubeadm and kubelet; nil to only check them.
	Binaries BinarySource
	// Services restarts the kubelet and the NTP client; nil means systemd through
	// Runner.
	Services service.Manager
}

// services returns the node's service manager.
func (h *Host) services() service.Manager {
	if h.Services == nil {
		return service.Systemd{Runner: h.Runner}
	}
	return h.Services
}

// path returns the agent's view of a host path.
func (h *Host) path(hostPath string) string { return filepath.Join(h.Root, hostPath) }

func (h *Host) planDir(hash string) string { return WorkDir + "/" + hash }

func (h *Host) run(ctx context.Context, name string, args ...string) (backend.Result, error) {
	return h.Runner.Run(ctx, backend.Command{Name: name, Args: args})
}

// etcdctlArgs are the flags kubeadm's own etcd health checks use.
func etcdctlArgs(args ...string) []string {
	return append([]string{
		"--endpoints=https://127.0.0.1:2379",
		"--cacert=/etc/kubernetes/pki/etcd/ca.crt",
		"--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
		"--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
	}, args...)
}

// SnapshotPath is the host path of a plan's etcd snapshot.
func (h *Host) SnapshotPath(hash string) string { return h.planDir(hash) + "/etcd-snapshot.db" }

// EtcdSnapshot saves an etcd snapshot for the plan. etcdctl writes to a
// temporary file and renames it, so a snapshot file is always complete.
func (h *Host) EtcdSnapshot(ctx context.Context, hash string) error {
	if err := os.MkdirAll(h.path(h.planDir(hash)), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", h.planDir(hash), err)
	}
	if _, err := h.Runner.Run(ctx, backend.Command{Name: "etcdctl", Args: etcdctlArgs("snapshot", "save", h.SnapshotPath(hash)),
		Env: []string{"ETCDCTL_API=3"}}); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	return nil
}

// RestoreEtcd restores the plan's snapshot into the node's etcd data directory;
// the replaced data directory is kept beside the snapshot. It is node-local: on a
// multi-member etcd the restored member rejoins from its peers' newer data, so the
// restore matters for single-member control planes.
func (h *Host) RestoreEtcd(ctx context.Context, hash string) error {
	done := h.path(h.planDir(hash) + "/etcd-restored")
	if _, err := os.Stat(done); err == nil {
		return nil
	}
	restore := h.planDir(hash) + "/etcd-restore"
	if err := os.MkdirAll(h.path(h.planDir(hash)), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", h.planDir(hash), err)
	}
	if err := os.RemoveAll(h.path(restore)); err != nil {
		return fmt.Errorf("clean %s: %w", restore, err)
	}
	if _, err := h.run(ctx, "etcdutl", "snapshot", "restore", h.SnapshotPath(hash), "--data-dir", restore); err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	replaced := h.path(h.planDir(hash) + "/etcd-replaced")
	_, errReplaced := os.Stat(replaced)
	_, errCurrent := os.Stat(h.path(EtcdDataDir))
	if os.IsNotExist(errReplaced) && errCurrent == nil {
		if err := os.Rename(h.path(EtcdDataDir), replaced); err != nil {
			return fmt.Errorf("move the current etcd data aside: %w", err)
		}
	}
	if err := os.Rename(h.path(restore), h.path(EtcdDataDir)); err != nil {
		return fmt.Errorf("move the restored etcd data in place: %w", err)
	}
	return atomicfile.Write(done, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
}

// EtcdHealthy checks the local etcd member.
func (h *Host) EtcdHealthy(ctx context.Context) error {
	if _, err := h.Runner.Run(ctx, backend.Command{Name: "etcdctl", Args: etcdctlArgs("endpoint", "health"), Env: []string{"ETCDCTL_API=3"}}); err != nil {
		return fmt.Errorf("etcd member health: %w", err)
	}
	return nil
}

// InstallBinaries makes sure kubeadm of the target version is on the node; the
// kubelet binary is replaced too (it takes effect at restart-kubelet).
func (h *Host) InstallBinaries(ctx context.Context, version string) error {
	if h.Binaries != nil {
		if err := h.Binaries.Install(ctx, version); err != nil {
			return fmt.Errorf("install kubeadm and kubelet %s: %w", version, err)
		}
	}
	res, err := h.run(ctx, "kubeadm", "version", "-o", "short")
	if err != nil {
		return fmt.Errorf("kubeadm version: %w", err)
	}
	got := strings.TrimSpace(string(res.Stdout))
	if !sameVersion(got, version) {
		return fmt.Errorf("kubeadm on the node is %s, the plan needs %s: deliver kubeadm and kubelet with the OS image or a package source", got, version)
	}
	return nil
}

func sameVersion(a, b string) bool {
	va, err1 := semver.ParseTolerant(a)
	vb, err2 := semver.ParseTolerant(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	va.Build, vb.Build = nil, nil
	return va.EQ(vb)
}

// KubeadmUpgrade runs the plan's kubeadm command.
func (h *Host) KubeadmUpgrade(ctx context.Context, k protocol.KubernetesPlan) error {
	var args []string
	switch k.Action {
	case protocol.KubeadmUpgradeApply:
		args = []string{"upgrade", "apply", k.Version, "--yes"}
	case protocol.KubeadmUpgradeNode:
		args = []string{"upgrade", "node"}
	default:
		return nil
	}
	if _, err := h.run(ctx, "kubeadm", args...); err != nil {
		return fmt.Errorf("kubeadm upgrade: %w", err)
	}
	return nil
}

// ControlPlaneConfig re-renders this control-plane node's static pods (component
// args and volumes, local etcd) from the cluster's kubeadm-config, which
// KubeadmControlPlane updates before it rolls machines: `kubeadm upgrade node` at
// the running version does exactly that, and the kubelet restarts the changed pods.
// Certificates are left alone: this is a configuration change, not an upgrade.
func (h *Host) ControlPlaneConfig(ctx context.Context) error {
	if _, err := h.run(ctx, "kubeadm", "upgrade", "node", "--certificate-renewal=false"); err != nil {
		return fmt.Errorf("re-render control-plane static pods: %w", err)
	}
	return nil
}

// RestartKubelet reloads units and restarts the kubelet through the node's
// service manager.
func (h *Host) RestartKubelet(ctx context.Context) error {
	if err := h.services().DaemonReload(ctx); err != nil {
		return fmt.Errorf("reload units: %w", err)
	}
	if err := h.services().Restart(ctx, service.KubeletUnit); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	return nil
}
