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
	// EtcdImageChanged: the plan names another etcd version
	// (ClusterConfiguration etcd.local.imageTag) than the node ran, or names one
	// where the node's is not known. Another imageRepository is the same etcd.
	EtcdImageChanged bool
}

// EtcdRestoreReason says why RestoreEtcdOnRollback decided as it did.
type EtcdRestoreReason string

// Reasons of RestoreEtcdOnRollback.
const (
	// EtcdMinorVersionChange: the Kubernetes minor version changes. The new API
	// server may rewrite stored objects in new storage versions the old one
	// cannot read, and kubeadm moves etcd to the version of the new minor.
	EtcdMinorVersionChange EtcdRestoreReason = "KubernetesMinorVersionChange"
	// EtcdImageChange: the plan names another etcd version (image tag).
	EtcdImageChange EtcdRestoreReason = "EtcdImageChange"
	// EtcdVersionUnknown: the node's version before the update is not known, so
	// a minor change cannot be ruled out.
	EtcdVersionUnknown EtcdRestoreReason = "VersionBeforeUnknown"
	// EtcdDataUnchanged: a patch version change or a configuration change only;
	// the old binaries read the data as the new ones left it.
	EtcdDataUnchanged EtcdRestoreReason = "DataFormatUnchanged"
	// EtcdPolicyAlways and EtcdPolicyNever: the policy decides whatever changed.
	EtcdPolicyAlways EtcdRestoreReason = "PolicyAlways"
	EtcdPolicyNever  EtcdRestoreReason = "PolicyNever"
)

// RestoreEtcdOnRollback is the one rule for whether the rollback of an update
// restores a single-member etcd from the snapshot taken before it. With
// IfDataChanged it restores when the update may have changed what etcd stores:
// the Kubernetes minor version changes, the etcd image changes, or the version
// before the update is unknown. A patch version change or a change of
// configuration only (files, kubelet args, ClusterConfiguration without an etcd
// image) keeps the data and every write made since the snapshot.
func RestoreEtcdOnRollback(policy EtcdRestore, c EtcdChange) (bool, EtcdRestoreReason) {
	switch policy {
	case EtcdRestoreAlways:
		return true, EtcdPolicyAlways
	case EtcdRestoreNever:
		return false, EtcdPolicyNever
	}
	if c.EtcdImageChanged {
		return true, EtcdImageChange
	}
	from, errFrom := ParseVersion(c.FromVersion)
	to, errTo := ParseVersion(c.ToVersion)
	switch {
	case errFrom != nil || errTo != nil:
		return true, EtcdVersionUnknown
	case from.Major != to.Major || from.Minor != to.Minor:
		return true, EtcdMinorVersionChange
	}
	return false, EtcdDataUnchanged
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
