package preview

import (
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ReportAPIVersion and ReportKind identify the JSON document printed by
// `capi-inplace plan -o json`.
const (
	ReportAPIVersion = "plan.inplace.capi-inplace.dev/v1alpha1"
	ReportKind       = "InPlacePlan"
)

// Verdict is what happens to one Machine.
type Verdict string

// Verdicts.
const (
	// VerdictUnchanged: the Machine already matches what its owner desires.
	VerdictUnchanged Verdict = "unchanged"
	// VerdictInPlace: capi-inplace updates the Machine's node where it stands; the
	// Machine keeps its name and UID.
	VerdictInPlace Verdict = "in-place"
	// VerdictReplace: Cluster API deletes the Machine and creates a new one.
	VerdictReplace Verdict = "replace"
)

// Roles of MachinePlan.Role.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// Who drains, in Drain.By.
const (
	DrainByInPlace    = "capi-inplace"
	DrainByClusterAPI = "cluster-api"
)

// Report is the whole plan, the document behind both the table and `-o json`. Its
// JSON field names are a stable interface: fields are only ever added.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Cluster    string `json:"cluster"`
	// Change is the file the proposed change came from; empty when the plan compares
	// the Machines with what their owners desire now.
	Change string `json:"change,omitempty"`
	// Notes are facts about the change that affect how to read the plan.
	Notes    []string      `json:"notes,omitempty"`
	Summary  Summary       `json:"summary"`
	Machines []MachinePlan `json:"machines"`
}

// Summary counts the machines of a Report by verdict.
type Summary struct {
	Machines  int `json:"machines"`
	InPlace   int `json:"inPlace"`
	Replace   int `json:"replace"`
	Unchanged int `json:"unchanged"`
}

// MachinePlan is the verdict on one Machine.
type MachinePlan struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
	// Role is "control-plane" or "worker".
	Role string `json:"role"`
	// Owner is what rolls the Machine out: "KubeadmControlPlane/<name>",
	// "MachineDeployment/<name>", or empty for a Machine nothing rolls out.
	Owner string `json:"owner,omitempty"`
	// Node is the Machine's status.nodeRef.name; empty until the node joined.
	Node string `json:"node,omitempty"`
	// Version is the Machine's Kubernetes version; DesiredVersion its owner's.
	Version        string `json:"version,omitempty"`
	DesiredVersion string `json:"desiredVersion,omitempty"`

	Verdict Verdict `json:"verdict"`
	// Path says how an in-place update is driven: Cluster API's hooks through
	// KubeadmControlPlane (CanUpdateMachine) or the MachineDeployment
	// (CanUpdateMachineSet), or capi-inplace's single-node control-plane path.
	Path string `json:"path,omitempty"`
	// Reasons say why the Machine is replaced: one per refused field (the planner's
	// reason) and one per rollout setting that makes Cluster API surge.
	Reasons []string `json:"reasons,omitempty"`
	// Causes are Reasons with their kind, in the same order.
	Causes []Cause `json:"causes,omitempty"`
	// Changes are the planner's decisions, one per differing field, covered or not.
	Changes []planner.Decision `json:"changes,omitempty"`
	// SecretsNotFound are the Secrets the desired KubeadmConfig of a Machine updated
	// in place references that do not exist: they are not counted against the
	// budget of referenced Secrets now, but when Cluster API updates the Machine.
	SecretsNotFound []string `json:"secretsNotFound,omitempty"`

	Drain  Drain  `json:"drain"`
	Reboot Reboot `json:"reboot"`
	// OSImage is set when the Machine's infrastructure OS image changes.
	OSImage *OSImageChange `json:"osImage,omitempty"`
	// Backend is the OS backend that would run on the node.
	Backend Backend `json:"backend"`
	// ImageOrder is which of the OS image and the Kubernetes upgrade the node runs
	// first, set when an in-place update boots a new image and upgrades Kubernetes.
	ImageOrder protocol.ImageOrder `json:"imageOrder,omitempty"`
	// EtcdOnRollback says what a rollback of this update does to the cluster's
	// etcd data; set for the control-plane node of a single-member local etcd,
	// the only case where a rollback can restore it.
	EtcdOnRollback *EtcdOnRollback `json:"etcdOnRollback,omitempty"`
}

// EtcdOnRollback is protocol.RestoreEtcdOnRollback's verdict for one update.
type EtcdOnRollback struct {
	// Restore is true when a rollback restores etcd from the snapshot taken when
	// the update starts: every write to the cluster after that is lost.
	Restore bool                       `json:"restore"`
	Reason  protocol.EtcdRestoreReason `json:"reason"`
}

// Drain says whether the node is drained before it changes.
type Drain struct {
	// Needed is true when pods are evicted from the node.
	Needed bool `json:"needed"`
	// By is who drains: capi-inplace (in place) or cluster-api (before deleting a
	// replaced Machine); empty when the Machine is unchanged.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Reboot says whether the node reboots during an in-place update.
type Reboot struct {
	Needed bool   `json:"needed"`
	Reason string `json:"reason,omitempty"`
}

// OSImageChange is a change of the infrastructure OS image field.
type OSImageChange struct {
	// Field is the image field's path in the infrastructure object.
	Field string `json:"field"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Artifact and Digest are the node-side artifact the policy maps To to; empty
	// when it maps to none (the change is then refused).
	Artifact string `json:"artifact,omitempty"`
	Digest   string `json:"digest,omitempty"`
}

// Backend is the OS backend of a Machine's node.
type Backend struct {
	// Name is the backend ("none": Kubernetes-only updates).
	Name string `json:"name"`
	// Source says where the name comes from: "policy artifact", "<Kind> annotation",
	// "Cluster annotation", "policy cluster entry", "policy default" or "none".
	Source string `json:"source"`
	// Runs is true when the backend swaps the OS image in this update.
	Runs bool `json:"runs"`
}

// Cause is one reason a Machine is replaced, with its kind: a small fixed set, so
// that callers can count and act on reasons without parsing their text (the admission
// guard labels its refusal metric with it).
type Cause struct {
	Kind    CauseKind `json:"kind"`
	Message string    `json:"message"`
}

// CauseKind classifies a Cause.
type CauseKind string

// Cause kinds.
const (
	// CauseField: the planner does not cover a changed field in place.
	CauseField CauseKind = "field"
	// CauseRollout: a rollout setting makes Cluster API create a new Machine first
	// (KCP maxSurge, MachineDeployment maxUnavailable 0 or OnDelete, rollout.after, a
	// control plane below three replicas without the single-node opt-in).
	CauseRollout CauseKind = "rollout"
	// CauseUnhealthyControlPlane: the control-plane Machine has an unhealthy
	// control-plane component, so KCP scales it down instead of updating it in place.
	CauseUnhealthyControlPlane CauseKind = "unhealthy-control-plane"
	// CauseMachineAnnotation: the Machine is marked for deletion or remediation.
	CauseMachineAnnotation CauseKind = "machine-annotation"
	// CauseNoNode: the Machine has no node yet.
	CauseNoNode CauseKind = "no-node"
	// CauseMissingObject: an object the comparison needs was not found.
	CauseMissingObject CauseKind = "missing-object"
	// CauseSecretBudget: the Secrets the desired KubeadmConfig references are over
	// the budget UpdateMachine reads them by (secretbudget), so the CanUpdate hooks
	// fail and the Machine's rollout waits until they fit.
	CauseSecretBudget CauseKind = "secret-budget"
)
