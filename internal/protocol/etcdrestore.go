package protocol

import "encoding/json"

// EtcdRestore is the policy for a single-member etcd when an update of its
// control-plane node rolls back: whether the etcd snapshot taken before the
// update replaces the data. A restore discards every write to the workload
// cluster since the snapshot (minutes to over an hour: reboot, gates).
type EtcdRestore string

const (
	// EtcdRestoreIfDataChanged (the default, also when empty) restores only when
	// the update may have changed what etcd stores (RestoreEtcdOnRollback).
	EtcdRestoreIfDataChanged EtcdRestore = "IfDataChanged"
	// EtcdRestoreAlways restores whenever the Kubernetes layer was touched.
	EtcdRestoreAlways EtcdRestore = "Always"
	// EtcdRestoreNever never restores: the rollback returns binaries, manifests
	// and configuration, and etcd keeps its data.
	EtcdRestoreNever EtcdRestore = "Never"
)

// Valid reports whether r is one of the policies or empty.
func (r EtcdRestore) Valid() bool {
	switch r {
	case "", EtcdRestoreIfDataChanged, EtcdRestoreAlways, EtcdRestoreNever:
		return true
	}
	return false
}

// EtcdChange is what is known, before an update starts, of what it does to the
// data etcd stores.
type EtcdChange struct {
	// FromVersion is the node's Kubernetes version before the update; empty
	// when unknown.
	FromVersion string
	// ToVersion is the plan's Kubernetes version.
	ToVersion string
	// FromEtcdImageTag and ToEtcdImageTag are the etcd versions the
	// ClusterConfiguration names (etcd.local.imageTag) before and after the
	// update; empty: kubeadm's default for the Kubernetes version
	// (KubeadmEtcdMinor). Another imageRepository is the same etcd.
	FromEtcdImageTag, ToEtcdImageTag string
	// FromEtcdUnknown: the etcd version the node runs is not known (the node
	// committed no plan whose imageTag the plan's can be compared with).
	FromEtcdUnknown bool
}

// EtcdRestoreReason says why RestoreEtcdOnRollback decided as it did.
type EtcdRestoreReason string

// Reasons of RestoreEtcdOnRollback.
const (
	// EtcdMinorVersionChange: the Kubernetes minor version changes. The new API
	// server may rewrite stored objects in new storage versions the old one
	// cannot read, and kubeadm moves etcd to the version of the new minor.
	EtcdMinorVersionChange EtcdRestoreReason = "KubernetesMinorVersionChange"
	// EtcdImageChange: the ClusterConfiguration names an etcd (image tag) of a
	// newer minor than the node runs, or names one where what the node runs is
	// not known, or one that is not a version.
	EtcdImageChange EtcdRestoreReason = "EtcdImageChange"
	// EtcdDefaultChange: no image tag pins etcd, and kubeadm of the new
	// Kubernetes version deploys a newer etcd minor than the node runs (kubeadm
	// moves its default etcd in patch releases too).
	EtcdDefaultChange EtcdRestoreReason = "KubeadmEtcdVersionChange"
	// EtcdDefaultUnknown: no image tag pins etcd, and the Kubernetes version is
	// not in capi-inplace's table of kubeadm's default etcd versions (a release
	// newer than this build), so a newer etcd minor cannot be ruled out.
	EtcdDefaultUnknown EtcdRestoreReason = "KubeadmEtcdVersionUnknown"
	// EtcdVersionUnknown: the node's version before the update is not known, so
	// a minor change cannot be ruled out.
	EtcdVersionUnknown EtcdRestoreReason = "VersionBeforeUnknown"
	// EtcdDataUnchanged: neither the Kubernetes minor nor etcd's minor changes;
	// the old binaries read the data as the new ones left it.
	EtcdDataUnchanged EtcdRestoreReason = "DataFormatUnchanged"
	// EtcdPolicyAlways and EtcdPolicyNever: the policy decides whatever changed.
	EtcdPolicyAlways EtcdRestoreReason = "PolicyAlways"
	EtcdPolicyNever  EtcdRestoreReason = "PolicyNever"
)

// RestoreEtcdOnRollback is the one rule for whether the rollback of an update
// restores a single-member etcd from the snapshot taken before it. With
// IfDataChanged it restores when the update may have changed what etcd stores:
// the Kubernetes minor version changes, the etcd that runs after the update is
// of a newer minor than the one before, or either is unknown. The etcd that
// runs is the image tag the ClusterConfiguration names, else kubeadm's default
// for the Kubernetes version (KubeadmEtcdMinor), as kubeadm upgrade picks it;
// kubeadm never moves etcd to an older version, so an older one named keeps
// the one before. Anything else (a patch version change that keeps etcd's
// minor, a change of configuration only) keeps the data and every write made
// since the snapshot: a patch release of etcd reads the data format of its
// minor.
func RestoreEtcdOnRollback(policy EtcdRestore, c EtcdChange) (bool, EtcdRestoreReason) {
	return restoreEtcdOnRollback(kubeadmEtcdReleases, policy, c)
}

// restoreEtcdOnRollback is RestoreEtcdOnRollback over a table of kubeadm's
// default etcd versions.
func restoreEtcdOnRollback(table []kubeadmEtcdRelease, policy EtcdRestore, c EtcdChange) (bool, EtcdRestoreReason) {
	switch policy {
	case EtcdRestoreAlways:
		return true, EtcdPolicyAlways
	case EtcdRestoreNever:
		return false, EtcdPolicyNever
	}
	from, errFrom := ParseVersion(c.FromVersion)
	to, errTo := ParseVersion(c.ToVersion)
	switch {
	case errFrom != nil || errTo != nil:
		return true, EtcdVersionUnknown
	case from.Major != to.Major || from.Minor != to.Minor:
		return true, EtcdMinorVersionChange
	case c.FromEtcdUnknown:
		return true, EtcdImageChange
	case sameRelease(from, to) && c.FromEtcdImageTag == c.ToEtcdImageTag:
		// The same kubeadm with the same tag deploys the etcd it deployed.
		return false, EtcdDataUnchanged
	}
	before, why := runningEtcd(table, c.FromEtcdImageTag, c.FromVersion)
	if why != "" {
		return true, why
	}
	after, why := runningEtcd(table, c.ToEtcdImageTag, c.ToVersion)
	if why != "" {
		return true, why
	}
	if before.less(after) {
		if c.ToEtcdImageTag != "" {
			return true, EtcdImageChange
		}
		return true, EtcdDefaultChange
	}
	return false, EtcdDataUnchanged
}

// runningEtcd is the etcd minor kubeadm runs for an image tag (empty: its
// default for the Kubernetes version); the reason to restore when it is not
// known.
func runningEtcd(table []kubeadmEtcdRelease, tag, version string) (EtcdMinor, EtcdRestoreReason) {
	if tag != "" {
		m, err := ParseEtcdMinor(tag)
		if err != nil {
			return EtcdMinor{}, EtcdImageChange
		}
		return m, ""
	}
	m, ok := kubeadmEtcdMinor(table, version)
	if !ok {
		return EtcdMinor{}, EtcdDefaultUnknown
	}
	return m, ""
}

// EtcdImageTag is the etcd version a ClusterConfiguration names
// (etcd.local.imageTag); empty when it names none (kubeadm's default for the
// Kubernetes version) or does not decode.
func EtcdImageTag(clusterConfiguration []byte) string {
	var cc struct {
		Etcd struct {
			Local struct {
				ImageTag string `json:"imageTag"`
			} `json:"local"`
		} `json:"etcd"`
	}
	if json.Unmarshal(clusterConfiguration, &cc) != nil {
		return ""
	}
	return cc.Etcd.Local.ImageTag
}
