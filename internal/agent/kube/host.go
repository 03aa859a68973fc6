package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/service"
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
	// WorkDir holds the journal and, under AttemptsDir, each update attempt's
	// backups and etcd snapshot.
	WorkDir = "/var/lib/capi-inplace"
)

// KubeletInstanceConfig is the node's own kubelet configuration patch that
// kubeadm 1.35+ writes beside config.yaml (containerRuntimeEndpoint); kubeadm
// upgrade rewrites it, so a rollback must restore it.
const KubeletInstanceConfig = "/var/lib/kubelet/instance-config.yaml"

// StaticPods returns the control-plane static pods kubeadm manages.
func StaticPods() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"}
}

// BinarySource puts kubeadm or the kubelet of a version on the host (a package
// manager, or the simulated host), one at a time: the agent installs kubeadm
// before kubeadm upgrade and the kubelet after it. Nil means the binaries must
// already be there, e.g. delivered by the OS image.
type BinarySource interface {
	// Install puts the binary at hostPath (KubeadmBinary or KubeletBinary) of
	// version in place.
	Install(ctx context.Context, hostPath, version string) error
}

// Host performs Kubernetes actions on one node.
type Host struct {
	// Root is the host's root directory as seen by the agent ("/" on the host,
	// "/host" in the DaemonSet, any directory for the simulated host).
	Root   string
	Runner backend.Runner
	// Binaries installs kubeadm and kubelet; nil to only check them.
	Binaries BinarySource
	// Store is the host's artifact store, where staging put the kubeadm and kubelet
	// a plan names by source and digest; nil means artifact.Store{Root: Root}.
	Store *artifact.Store
	// Etcd is the node's local etcd member (etcd.KubeadmLocal on a control-plane
	// node, the simulated host's fake); nil on a node without etcd.
	Etcd etcd.Member
	// FreeBytes reports the free space of the file system of an agent-view path;
	// nil means statfs (tests inject a full disk).
	FreeBytes func(path string) (uint64, error)
	// Services restarts the kubelet and the NTP client; nil means systemd through
	// Runner.
	Services service.Manager
	// PreflightRetryPause is the pause between preflight attempts of `kubeadm
	// upgrade apply`; zero means PreflightRetryPause.
	PreflightRetryPause time.Duration
	// Rescue is the static pod kept in place on a control plane while an update
	// may leave it unable to start its API server (RescueManifest,
	// state.RescueWanted); nil means none.
	Rescue *RescuePod
}

// services returns the node's service manager.
func (h *Host) services() service.Manager {
	if h.Services == nil {
		return service.Systemd{Runner: h.Runner}
	}
	return h.Services
}

func (h *Host) run(ctx context.Context, name string, args ...string) (backend.Result, error) {
	return h.Runner.Run(ctx, backend.Command{Name: name, Args: args})
}

// runLogged is run for a long command whose output tells where its time goes
// (kubeadm's phases): each line goes to the logger in ctx as it is written.
func (h *Host) runLogged(ctx context.Context, name string, args ...string) (backend.Result, error) {
	log := logr.FromContextOrDiscard(ctx).WithValues("command", name)
	return h.Runner.Run(ctx, backend.Command{Name: name, Args: args, Output: func(line string) {
		log.Info("Command output", "line", line)
	}})
}

// checkKubeadmVersion fails unless the node's kubeadm reports version.
func (h *Host) checkKubeadmVersion(ctx context.Context, version string) error {
	res, err := h.run(ctx, "kubeadm", "version", "-o", "short")
	if err != nil {
		return fmt.Errorf("kubeadm version: %w", err)
	}
	got := strings.TrimSpace(string(res.Stdout))
	if !protocol.SameRelease(got, version) {
		return fmt.Errorf("kubeadm on the node is %s, the plan needs %s: deliver kubeadm and kubelet with the OS image or a package source, or list them in the policy's kubernetesBinaries", got, version)
	}
	return nil
}

// KubeadmUpgrade runs the plan's kubeadm command, skipping the preflight checks
// the plan lists. `kubeadm upgrade apply` runs its preflight phase first, on its
// own and up to PreflightAttempts times (applyPreflight), then the rest of the
// workflow without it. Where staging put the control-plane images on the node,
// the preflight does not pull images (imagePullFlags).
func (h *Host) KubeadmUpgrade(ctx context.Context, k protocol.KubernetesPlan) error {
	if k.Action != protocol.KubeadmUpgradeApply && k.Action != protocol.KubeadmUpgradeNode {
		return nil
	}
	pull, err := h.imagePullFlags(k)
	if err != nil {
		return err
	}
	if len(pull) > 0 {
		defer func() { _ = h.removeHostFile(UpgradeConfig) }()
	}
	var args []string
	switch k.Action {
	case protocol.KubeadmUpgradeApply:
		args = []string{"upgrade", "apply", k.Version, "--yes"}
		if applyHasPhases(k.Version) {
			if err := h.applyPreflight(ctx, k, pull); err != nil {
				return err
			}
			args = append(args, "--skip-phases=preflight")
		} else {
			args = append(args, pull...)
		}
	case protocol.KubeadmUpgradeNode:
		args = append([]string{"upgrade", "node"}, pull...)
	}
	if _, err := h.runLogged(ctx, "kubeadm", append(args, k.PreflightFlag()...)...); err != nil {
		return fmt.Errorf("kubeadm upgrade: %w", err)
	}
	return nil
}

// UpgradeConfig is the kubeadm UpgradeConfiguration file (noPullFlags) that
// `kubeadm upgrade` reads with --config while it runs.
const UpgradeConfig = WorkDir + "/upgrade.yaml"

// upgradeConfiguration is kubeadm's v1beta4 UpgradeConfiguration (kubeadm 1.31
// and later) with the image pull of both preflights turned off, certificates
// renewed or not by `upgrade node`, and every other setting at kubeadm's default.
func upgradeConfiguration(certificateRenewal bool) []byte {
	return fmt.Appendf(nil, `apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
apply:
  imagePullPolicy: Never
node:
  imagePullPolicy: Never
  certificateRenewal: %t
`, certificateRenewal)
}

// imagePullFlags returns the flags that turn off the image pull of `kubeadm
// upgrade`'s preflight on a control plane where staging has already pulled
// every image the static pods need with the same kubeadm
// (StagesControlPlaneImages); otherwise none. That pull lists more than the
// static pods: it pulls the CoreDNS and kube-proxy images too, which only their
// Deployment and DaemonSet run (on nodes whose kubelet pulls them) and which
// Cluster API's ClusterConfiguration cannot declare unused. Inside the
// disruptive window that costs a download, and where the registry lacks them (a
// cluster that runs neither) minutes of pull retries and an ImagePull error the
// policy would have to ignore. Without staged images kubeadm keeps its pull: a
// missing image then fails the preflight, which changed nothing, rather than the
// static pods' upgrade.
func (h *Host) imagePullFlags(k protocol.KubernetesPlan) ([]string, error) {
	if !StagesControlPlaneImages(k) {
		return nil, nil
	}
	return h.noPullFlags(k.Version, true)
}

// noPullFlags writes UpgradeConfig and returns the flags that hand it to
// kubeadm of version, or none where kubeadm reads no UpgradeConfiguration.
func (h *Host) noPullFlags(version string, certificateRenewal bool) ([]string, error) {
	if !hasUpgradeConfiguration(version) {
		return nil, nil
	}
	if err := h.writeHostFile(UpgradeConfig, upgradeConfiguration(certificateRenewal), 0o600, -1, -1); err != nil {
		return nil, fmt.Errorf("kubeadm upgrade: write %s: %w", UpgradeConfig, err)
	}
	return []string{"--config", UpgradeConfig}, nil
}

// hasUpgradeConfiguration says whether kubeadm of version reads a v1beta4
// UpgradeConfiguration: kubeadm 1.31 and later.
func hasUpgradeConfiguration(version string) bool {
	v, err := protocol.ParseVersion(version)
	return err == nil && (v.Major > 1 || v.Minor >= 31)
}

// ErrNodeUnchanged is wrapped by an action's error when the action failed before
// it changed anything on the node (kubeadm's preflight phase), so that its
// rollback need not undo it: above all, a single-member etcd keeps its data
// instead of being restored from the snapshot, which would drop every write
// since.
var ErrNodeUnchanged = errors.New("the node is unchanged")

// PreflightAttempts and PreflightRetryPause bound applyPreflight.
const (
	PreflightAttempts   = 3
	PreflightRetryPause = 10 * time.Second
)

// applyPreflight runs `kubeadm upgrade apply phase preflight` until it passes, at
// most PreflightAttempts times. The phase changes nothing on the node, and one of
// its checks (CreateJob) needs the cluster to schedule and run a pod on another
// schedulable node within 60 s, which a busy cluster can miss once: failing the
// action then would roll the node back (on a control plane, an etcd restore and
// an API outage) for a check that passes a minute later.
func (h *Host) applyPreflight(ctx context.Context, k protocol.KubernetesPlan, pull []string) error {
	args := append(append([]string{"upgrade", "apply", "phase", "preflight", k.Version, "--yes"}, pull...), k.PreflightFlag()...)
	pause := h.PreflightRetryPause
	if pause == 0 {
		pause = PreflightRetryPause
	}
	var err error
	for attempt := 1; ; attempt++ {
		if _, err = h.runLogged(ctx, "kubeadm", args...); err == nil {
			return nil
		}
		if attempt == PreflightAttempts {
			return fmt.Errorf("kubeadm upgrade apply: preflight failed %d times, %w: %w", attempt, ErrNodeUnchanged, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeadm upgrade apply: preflight: %w (after %d attempts: %w)", ctx.Err(), attempt, err)
		case <-time.After(pause):
		}
	}
}

// applyHasPhases says whether kubeadm of version runs `upgrade apply` as phases
// (`phase preflight`, `--skip-phases`): kubeadm 1.32 and later.
func applyHasPhases(version string) bool {
	v, err := protocol.ParseVersion(version)
	return err == nil && (v.Major > 1 || v.Minor >= 32)
}

// ControlPlaneConfig re-renders this control-plane node's static pods (component
// args and volumes, local etcd) from the cluster's kubeadm-config, which
// KubeadmControlPlane updates before it rolls machines: `kubeadm upgrade node` at
// the running version does exactly that, and the kubelet restarts the changed pods.
// Certificates are left alone: this is a configuration change, not an upgrade.
// The plan's preflight exceptions apply: it is the same kubeadm command. Its
// preflight pulls no image when the re-rendered pods run the images the node runs
// now (runsRenderedImages; the pull would fetch CoreDNS and kube-proxy, as in
// imagePullFlags); a change of image keeps kubeadm's pull, so a missing image
// fails the preflight instead of the control plane.
func (h *Host) ControlPlaneConfig(ctx context.Context, plan *protocol.NodePlan) error {
	k := plan.Kubernetes
	var flags []string
	if h.runsRenderedImages(plan.ClusterConfiguration) {
		var err error
		if flags, err = h.noPullFlags(k.Version, false); err != nil {
			return err
		}
	}
	if len(flags) > 0 {
		defer func() { _ = h.removeHostFile(UpgradeConfig) }()
	} else {
		flags = []string{"--certificate-renewal=false"}
	}
	args := append(append([]string{"upgrade", "node"}, flags...), k.PreflightFlag()...)
	if _, err := h.run(ctx, "kubeadm", args...); err != nil {
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
