package state

import (
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ActionName names one step the executor performs. Forward and rollback actions
// share the name space; Action.Rollback tells them apart.
type ActionName string

// Forward actions, in the order Derive emits them.
const (
	// ActEtcdSnapshot saves an etcd snapshot before a control-plane node is touched.
	ActEtcdSnapshot ActionName = "etcd-snapshot"
	// ActBackendStage fetches and verifies the OS artifact beside the running image.
	ActBackendStage ActionName = "backend-stage"
	// ActBackendActivate makes the staged image the next boot (or applies it live).
	ActBackendActivate ActionName = "backend-activate"
	// ActReboot reboots the node; it is done once a new boot ID is observed.
	ActReboot ActionName = "reboot"
	// ActBackendVerify confirms that the node runs the new image.
	ActBackendVerify ActionName = "backend-verify"
	// ActBackupFiles backs up every file the Kubernetes part may change (plan files,
	// kubelet flags and config, static pod manifests, kubeadm and kubelet binaries).
	ActBackupFiles ActionName = "backup-files"
	// ActWriteFiles writes the plan's files atomically.
	ActWriteFiles ActionName = "write-files"
	// ActApplyUsers creates or updates the KubeadmConfig users.
	ActApplyUsers ActionName = "apply-users"
	// ActApplyNTP configures the host's NTP client.
	ActApplyNTP ActionName = "apply-ntp"
	// ActKubeletConfig writes the kubelet extra args (kubeadm-flags.env).
	ActKubeletConfig ActionName = "kubelet-config"
	// ActControlPlaneConfig re-renders the control-plane static pods from the
	// cluster's kubeadm-config (which KubeadmControlPlane updated) when the plan's
	// ClusterConfiguration changed without a version change.
	ActControlPlaneConfig ActionName = "control-plane-config"
	// ActInstallKubeadm makes sure kubeadm of the target version is on the node
	// (delivered by the plan, from a package source, or with the OS image).
	ActInstallKubeadm ActionName = "install-kubeadm"
	// ActKubeadmUpgrade runs kubeadm upgrade apply or kubeadm upgrade node.
	ActKubeadmUpgrade ActionName = "kubeadm-upgrade"
	// ActInstallKubelet puts the kubelet of the target version in place, after
	// kubeadm upgraded the node, as kubeadm's own procedure orders it: a kubelet
	// that starts before then (a power cut, systemd restarting it) must not be
	// newer than the API server it reports to.
	ActInstallKubelet ActionName = "install-kubelet"
	// ActInstallBinaries installs kubeadm and the kubelet in one action, before
	// kubeadm upgrade. Derive no longer emits it; a journal that lists it (written
	// by an agent that did) resumes with it.
	ActInstallBinaries ActionName = "install-binaries"
	// ActRestartKubelet restarts the kubelet so it runs the new binary and config.
	ActRestartKubelet ActionName = "restart-kubelet"
	// ActGates runs the health gates; a failure rolls everything back.
	ActGates ActionName = "gates"
	// ActBackendCommit marks the running image good.
	ActBackendCommit ActionName = "backend-commit"
)

// Rollback-only actions (reboot and restart-kubelet are reused in rollbacks).
const (
	// ActRestoreFiles restores everything backup-files saved, binaries included.
	ActRestoreFiles ActionName = "restore-files"
	// ActRestoreEtcd restores the etcd snapshot taken before the node was touched,
	// on a one-member etcd only: the member is stopped, restored with its own name,
	// peer URLs and cluster token, and started again. A member of a larger cluster
	// is never restored from a snapshot (that would make it a new one-member
	// cluster on stale data beside the real one: split brain); its rollback
	// restores binaries, manifests and configuration and it catches up from its
	// peers through raft.
	ActRestoreEtcd ActionName = "restore-etcd"
	// ActBackendRollback returns the OS backend to the image that ran before.
	ActBackendRollback ActionName = "backend-rollback"
	// ActVerifyRollback checks, after the reboot that ends an image rollback,
	// that the node runs the image it ran before the plan: what the image owns (a
	// read-only /usr with kubeadm and the kubelet on ostree and bootc) comes back
	// only with it, so a node that booted the plan's image again is not rolled
	// back, whatever the restored files say.
	ActVerifyRollback ActionName = "verify-rollback"
)

// Action is one entry of a state's ordered action list.
type Action struct {
	Name     ActionName `json:"name"`
	Rollback bool       `json:"rollback,omitempty"`
	Done     bool       `json:"done,omitempty"`
	// Skipped: done without running, because the node did not need it: a
	// rollback's reboot into the image that already runs (ImageObserved).
	Skipped bool `json:"skipped,omitempty"`
	// Failures counts the failed runs of a rollback action (RollbackAttempts).
	Failures int `json:"failures,omitempty"`
}

// Key identifies the action in the journal's run counters: forward and rollback
// runs of the same name are counted apart.
func (a Action) Key() string {
	if a.Rollback {
		return "rollback/" + string(a.Name)
	}
	return string(a.Name)
}

// Spec is what the action list depends on: the plan's shape and the backend's
// capabilities. It is kept in the State so that a rollback can be derived after a
// restart without the plan or the backend.
type Spec struct {
	ControlPlane bool `json:"controlPlane,omitempty"`
	EtcdSnapshot bool `json:"etcdSnapshot,omitempty"`
	// ExternalEtcd: the node has no etcd member (protocol.KubernetesPlan.ExternalEtcd),
	// so nothing is snapshotted or restored whatever else changes.
	ExternalEtcd bool                   `json:"externalEtcd,omitempty"`
	Kubeadm      protocol.KubeadmAction `json:"kubeadm,omitempty"`
	Version      string                 `json:"version,omitempty"`
	Files        bool                   `json:"files,omitempty"`
	KubeletArgs  bool                   `json:"kubeletArgs,omitempty"`
	Users        bool                   `json:"users,omitempty"`
	NTP          bool                   `json:"ntp,omitempty"`
	// ControlPlaneConfig: the ClusterConfiguration differs from the last committed
	// plan's (or none was committed yet); set by the executor, which knows it.
	ControlPlaneConfig bool                 `json:"controlPlaneConfig,omitempty"`
	OS                 bool                 `json:"os,omitempty"`
	Caps               backend.Capabilities `json:"caps"`
	// KeepEtcd: a rollback leaves a single-member etcd's data as it is instead
	// of restoring the snapshot, because protocol.RestoreEtcdOnRollback said so
	// when the plan started (EtcdReason is why). False, as in every journal from
	// before the field, restores.
	KeepEtcd   bool                       `json:"keepEtcd,omitempty"`
	EtcdReason protocol.EtcdRestoreReason `json:"etcdReason,omitempty"`
	// BinariesDelivered: the plan brings kubeadm and the kubelet of its version
	// (protocol.KubernetesPlan.Binaries), so the Kubernetes change can run before
	// the node boots a new image. False: they come with the image.
	BinariesDelivered bool `json:"binariesDelivered,omitempty"`
}

// EtcdRollback fills in KeepEtcd and EtcdReason for the plan's policy and what
// the update changes (protocol.RestoreEtcdOnRollback).
func (s Spec) EtcdRollback(policy protocol.EtcdRestore, c protocol.EtcdChange) Spec {
	restore, why := protocol.RestoreEtcdOnRollback(policy, c)
	s.KeepEtcd, s.EtcdReason = !restore, why
	return s
}

// SpecFor extracts the Spec of a plan for a backend with the given capabilities.
func SpecFor(p *protocol.NodePlan, caps backend.Capabilities) Spec {
	return Spec{
		ControlPlane: p.Kubernetes.Role == protocol.RoleControlPlane,
		EtcdSnapshot: p.Kubernetes.EtcdSnapshot,
		ExternalEtcd: p.Kubernetes.ExternalEtcd,
		Kubeadm:      p.Kubernetes.Action,
		Version:      p.Kubernetes.Version,
		Files:        len(p.Files) > 0,
		KubeletArgs:  len(p.KubeletExtraArgs) > 0,
		Users:        protocol.UsersListed(p.Users),
		NTP:          protocol.NTPEnabled(p.NTP),
		OS:           p.OS != nil,
		Caps:         caps,

		BinariesDelivered: p.Kubernetes.Binaries != nil,
	}
}

func (s Spec) kubeadm() bool { return s.Kubeadm != "" && s.Kubeadm != protocol.KubeadmNone }

// kubernetesBeforeImage reports whether the Kubernetes change runs before the new
// OS image boots: for an update that does both, protocol.OrderImageAndKubernetes
// decides (docs/backends.md).
func (s Spec) kubernetesBeforeImage() bool {
	return s.OS && s.Caps.NeedsReboot && s.kubeadm() &&
		protocol.OrderImageAndKubernetes(s.ControlPlane, s.BinariesDelivered) == protocol.ImageOrderKubernetesFirst
}

// Derive returns the forward actions for a spec. The OS image is switched first
// (binaries of the new Kubernetes version may come with the image, and with
// NeedsReboot they exist only after the reboot), then the Kubernetes part runs on
// top of it, then the gates decide whether to commit; except on a control plane
// that can upgrade its static pods before booting the image
// (kubernetesBeforeImage): there the image is staged first, activated and booted
// after kubeadm, and the reboot restarts the kubelet.
func Derive(s Spec) []Action {
	var names []ActionName
	if s.ControlPlane && !s.ExternalEtcd && (s.EtcdSnapshot || s.kubeadm() || s.OS) {
		names = append(names, ActEtcdSnapshot)
	}
	k8sFirst := s.kubernetesBeforeImage()
	switchImage := func() {
		names = append(names, ActBackendActivate)
		if s.Caps.NeedsReboot {
			names = append(names, ActReboot)
		}
		names = append(names, ActBackendVerify)
	}
	if s.OS {
		names = append(names, ActBackendStage)
		if !k8sFirst {
			switchImage()
		}
	}
	cpConfig := s.ControlPlane && s.ControlPlaneConfig && !s.kubeadm()
	if s.Files || s.Users || s.NTP || s.KubeletArgs || cpConfig || s.kubeadm() {
		names = append(names, ActBackupFiles)
	}
	if s.Files {
		names = append(names, ActWriteFiles)
	}
	if s.Users {
		names = append(names, ActApplyUsers)
	}
	if s.NTP {
		names = append(names, ActApplyNTP)
	}
	if s.KubeletArgs {
		names = append(names, ActKubeletConfig)
	}
	if cpConfig {
		names = append(names, ActControlPlaneConfig)
	}
	if s.kubeadm() {
		names = append(names, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet)
	}
	if (s.KubeletArgs || s.kubeadm()) && !k8sFirst {
		names = append(names, ActRestartKubelet)
	}
	if k8sFirst {
		switchImage()
	}
	names = append(names, ActGates)
	if s.OS {
		names = append(names, ActBackendCommit)
	}
	out := make([]Action, len(names))
	for i, n := range names {
		out[i] = Action{Name: n}
	}
	return out
}

// DeriveRollback returns the rollback actions for the forward actions that were
// started (done, or failed while running: a failed action may have changed part of
// the node). Each layer is undone where it can be:
//   - An OS image that takes effect at a reboot (ostree, bootc, A/B slots) is rolled
//     back first: that only selects the previous image for the next boot, so it
//     cannot be blocked by the Kubernetes layer (on ostree and bootc /usr, with
//     kubeadm and kubelet, is read-only and comes back with the image, not from our
//     backup), and a files restore that fails still leaves the node booting into
//     the image it ran before.
//   - An OS change applied live (packages) is rolled back after the Kubernetes
//     layer, last in first out: the backup was taken after the OS change, so
//     restoring it after the OS rollback would put the new packages' files back.
//
// Then the Kubernetes files and binaries, then the etcd data that belongs to them,
// then the reboot, so the node comes up once on a fully restored state, and after
// an image rollback's reboot the check that the old image runs (ActVerifyRollback);
// the kubelet is restarted last when no reboot does it. A reboot that would boot the image
// already running (the node fell back to it by itself) is skipped when it is due,
// with a kubelet restart in its place if the restore needs one (ImageObserved).
// etcdMembers is the member count the etcd-snapshot action saw: the etcd data is
// restored only when it was exactly one (0, unknown, restores nothing), and only
// when the spec does not keep it (KeepEtcd: the update did not change what etcd
// stores, or the policy says never): a restore drops every write made since the
// snapshot. failed is the action that failed while running; empty when none did
// or the one that failed changed nothing (ActionFailed.Unchanged).
func DeriveRollback(s Spec, forward []Action, failed ActionName, etcdMembers int) []Action {
	started, done := startedActions(forward, failed)
	var names []ActionName
	osAtReboot := started[ActBackendStage] && s.Caps.NeedsReboot
	if osAtReboot {
		names = append(names, ActBackendRollback)
	}
	if restoresFiles(started) {
		names = append(names, ActRestoreFiles)
	}
	if done[ActEtcdSnapshot] && etcdMembers == 1 && !s.KeepEtcd && (started[ActKubeadmUpgrade] || started[ActControlPlaneConfig]) {
		names = append(names, ActRestoreEtcd)
	}
	if started[ActBackendStage] && !osAtReboot {
		names = append(names, ActBackendRollback)
	}
	// A reboot that failed did not happen: only a completed one must be undone.
	reboot := done[ActReboot]
	if reboot {
		names = append(names, ActReboot)
		if osAtReboot {
			names = append(names, ActVerifyRollback)
		}
	}
	if restartsKubelet(started) && !reboot {
		names = append(names, ActRestartKubelet)
	}
	out := make([]Action, len(names))
	for i, n := range names {
		out[i] = Action{Name: n, Rollback: true}
	}
	return out
}

// startedActions returns the forward actions that were started (done, or failed
// while running: failed, empty when none) and those done.
func startedActions(forward []Action, failed ActionName) (started, done map[ActionName]bool) {
	started, done = map[ActionName]bool{}, map[ActionName]bool{}
	if failed != "" {
		started[failed] = true
	}
	for _, a := range forward {
		if a.Done {
			started[a.Name] = true
			done[a.Name] = true
		}
	}
	return started, done
}

// restoresFiles reports whether the rollback of the started actions restores the
// backup (ActRestoreFiles).
func restoresFiles(started map[ActionName]bool) bool {
	return started[ActWriteFiles] || started[ActApplyUsers] || started[ActApplyNTP] || started[ActKubeletConfig] || started[ActControlPlaneConfig] ||
		started[ActInstallKubeadm] || started[ActInstallKubelet] || started[ActInstallBinaries] || started[ActKubeadmUpgrade] || started[ActRestartKubelet]
}

// restartsKubelet reports whether the restore of the started actions changes
// what the kubelet reads when it starts (its binary, flags, configuration, the
// plan's files), so the kubelet must start again unless a reboot starts it.
func restartsKubelet(started map[ActionName]bool) bool {
	return restoresFiles(started) && (started[ActWriteFiles] || started[ActKubeletConfig] || started[ActInstallKubelet] || started[ActInstallBinaries] ||
		started[ActKubeadmUpgrade] || started[ActRestartKubelet])
}

// phaseOf is the phase reported while a forward action is the next one.
func phaseOf(n ActionName) protocol.Phase {
	switch n {
	case ActEtcdSnapshot, ActBackendStage:
		return protocol.PhaseStaging
	case ActReboot:
		return protocol.PhaseRebooting
	case ActGates, ActBackendCommit:
		return protocol.PhaseVerifying
	default:
		return protocol.PhaseApplying
	}
}
