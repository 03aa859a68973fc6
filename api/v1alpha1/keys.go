package v1alpha1

// GroupName is the prefix of every annotation, label and object name we own.
const GroupName = "inplace.capi-inplace.dev"

// Version is the version of the node protocol (plan and status envelopes).
const Version = "v1alpha1"

// Node annotations: the node-side protocol between the coordinator (management
// cluster) and the agent (on the node). They follow the machine-config daemon's
// desired/current/state pattern so that `kubectl get node -o yaml` explains a node.
const (
	// DesiredPlanAnnotation holds the hash of the plan the coordinator wants applied.
	// Written only by the coordinator.
	DesiredPlanAnnotation = GroupName + "/desired-plan"

	// CurrentPlanAnnotation holds the hash of the last plan the agent committed.
	// Written only by the agent.
	CurrentPlanAnnotation = GroupName + "/current-plan"

	// StateAnnotation holds the agent's phase for the desired plan (see protocol.Phase).
	// Written only by the agent.
	StateAnnotation = GroupName + "/state"

	// StatusAnnotation holds the agent's full status envelope as JSON
	// (see protocol.NodeStatus). Written only by the agent.
	StatusAnnotation = GroupName + "/status"

	// AgentKeyAnnotation holds the public key (protocol.FormatAgentKey) the agent
	// generated on its host, whose private half never leaves the node: the
	// coordinator seals the node's plan to it, so no other node can read the plan.
	// Written only by the agent, on its own Node (see agentinstall's policy).
	AgentKeyAnnotation = GroupName + "/agent-key"

	// CordonedByAnnotation is set by the coordinator when it cordoned the node, so that
	// it uncordons only nodes it cordoned itself and never undoes an operator's cordon.
	CordonedByAnnotation = GroupName + "/cordoned-by"

	// UpdateStartedAnnotation is set by the coordinator, to an RFC 3339 time, when it
	// starts a node update (before cordon and drain) and removed when the update ends
	// in success or failure. It bounds the drain time and marks an update in flight
	// across coordinator restarts. Written only by the coordinator.
	UpdateStartedAnnotation = GroupName + "/update-started"

	// DrainedAnnotation is set by the coordinator, to an RFC 3339 time, when the
	// drain of a node update has ended and it starts to wait for the node's volumes
	// to detach: the Machine's nodeVolumeDetachTimeoutSeconds counts from it, as
	// Cluster API counts it from the drain's end. A value before the node's
	// UpdateStartedAnnotation belongs to an earlier update and is ignored.
	// Written only by the coordinator.
	DrainedAnnotation = GroupName + "/drained"

	// PlanPublishedAnnotation is set by the coordinator, to an RFC 3339 time, when it
	// points the node's DesiredPlanAnnotation at a new plan; it dates the agent's
	// pick-up deadline. Written only by the coordinator.
	PlanPublishedAnnotation = GroupName + "/plan-published"

	// PlanNotPickedUpAnnotation is set by the coordinator to the hash of a plan whose
	// agent reported nothing for it within the pick-up deadline: the plan was
	// withdrawn and the node uncordoned, and every later call for that plan answers
	// Failure. An operator removes it to retry. Written only by the coordinator.
	PlanNotPickedUpAnnotation = GroupName + "/plan-not-picked-up"
)

// Machine annotations (management cluster).
const (
	// RemediationHeldByAnnotation is set by the coordinator, together with Cluster
	// API's cluster.x-k8s.io/skip-remediation, on a Machine whose node an in-place
	// update owns (from before cordon until the update ends), so that a
	// MachineHealthCheck does not replace a node that is NotReady only because we are
	// updating it. It records that the skip-remediation annotation is ours: the
	// coordinator removes only a skip-remediation it set itself, never an operator's.
	// Written only by the coordinator.
	RemediationHeldByAnnotation = GroupName + "/skip-remediation-set-by"

	// UpdatePhaseAnnotation is the coordinator's clock of a node update (JSON: the
	// plan, its phase and since when, as the coordinator saw them on its own clock):
	// the per-phase deadlines are judged from it, never from a time the node can
	// write. Written only by the coordinator; the retry annotation clears it.
	UpdatePhaseAnnotation = GroupName + "/update-phase"

	// RetriedPlanAnnotation names the plan an operator's retry withdrew (its hash).
	// While the node's published plan is that one, the coordinator publishes its own
	// build instead of keeping it, so that a retry takes what was fixed since (the
	// policy's binaries, gates, preflight checks, a registry credential); the build
	// keeps the withdrawn plan's kubeadm choices. Removed once the build is published.
	// Written only by the coordinator.
	RetriedPlanAnnotation = GroupName + "/retried-plan"
)

// DeadlineExceededAnnotation on a Node holds why the coordinator keeps it cordoned
// after its update passed a phase's deadline (the phase, since when, what was last
// seen); removed when the update ends otherwise or is retried. Written only by the
// coordinator.
const DeadlineExceededAnnotation = GroupName + "/deadline-exceeded"

// Labels.
const (
	// PlanNodeLabel is set on plan Secrets to the name of the node the plan is for.
	PlanNodeLabel = GroupName + "/node"

	// ManagedByLabel marks every object the extension writes into a workload cluster.
	ManagedByLabel = "app.kubernetes.io/managed-by"

	// ManagedByValue is the value of ManagedByLabel on our objects.
	ManagedByValue = "capi-inplace"

	// NamespaceEnabledLabel, set to "true" on a namespace of the management cluster,
	// selects it in the ExtensionConfig's namespaceSelector (config/extensionconfig):
	// capi-inplace answers the in-place hooks for Clusters in that namespace.
	NamespaceEnabledLabel = GroupName + "/enabled"
)

// NamespaceEnabled reports whether a management-cluster namespace with these labels
// opted in to capi-inplace (NamespaceEnabledLabel "true"): the one rule the hooks, the
// single-node path and the guard apply, beside the API server's namespaceSelectors,
// which only filter the calls the API server itself makes.
func NamespaceEnabled(labels map[string]string) bool {
	return labels[NamespaceEnabledLabel] == "true"
}

// AgentNamespace is the namespace in each workload cluster that holds the agent
// DaemonSet, its RBAC and the per-node plan Secrets.
const AgentNamespace = "capi-inplace-system"

// PlanSecretDataKey is the key of the plan inside a plan Secret.
const PlanSecretDataKey = "plan.json"

// PlanSecretName returns the name of the Secret holding the plan for a node.
func PlanSecretName(nodeName string) string { return "plan-" + nodeName }

// Cluster-level opt-ins and policy, set by the operator on the CAPI Cluster object.
const (
	// SingleNodeControlPlaneAnnotation opts a Cluster into capi-inplace's own in-place
	// path for control planes of fewer than three replicas, which upstream
	// KubeadmControlPlane cannot update in place. Value "true".
	SingleNodeControlPlaneAnnotation = GroupName + "/single-node-control-plane"

	// SingleNodeOptInCopiedAnnotation on a KubeadmControlPlane records that the
	// single-node controller copied the Cluster's SingleNodeControlPlaneAnnotation onto
	// it (value "true"). The copy is made once: Cluster API v1.14.2 can delete every
	// annotation of a Cluster (docs/single-node.md), the KCP's copy survives that, and
	// an operator who later removes the KCP's copy is not overruled.
	SingleNodeOptInCopiedAnnotation = GroupName + "/single-node-control-plane-copied"

	// BackendAnnotation names the OS backend for a Cluster's nodes; on a
	// MachineDeployment or KubeadmControlPlane it overrides the Cluster's value.
	BackendAnnotation = GroupName + "/backend"

	// PausedAnnotation on a Cluster stops the coordinator from starting new node
	// updates; updates in flight continue to a safe point.
	PausedAnnotation = GroupName + "/paused"
)

// ExtensionConfig settings keys (spec.settings, passed in every hook request).
const (
	// SettingDisableInPlaceUpdates, when "true", makes both CanUpdate hooks cover
	// nothing, so that CAPI falls back to its immutable rollout. Upstream's own test
	// suites set this key on extensions of our kind.
	SettingDisableInPlaceUpdates = "disableInPlaceUpdates"
)

// Condition types and reasons we set on CAPI objects.
const (
	// InPlaceUpdateCondition on a Machine or Cluster reports capi-inplace's view.
	InPlaceUpdateCondition = "InPlaceUpdate"

	ReasonInProgress   = "InPlaceUpdateInProgress"
	ReasonSucceeded    = "InPlaceUpdateSucceeded"
	ReasonRolledBack   = "InPlaceUpdateRolledBack"
	ReasonFailed       = "InPlaceUpdateFailed"
	ReasonDrainBlocked = "DrainBlocked"
	// ReasonDegraded: the node's rollback failed or its agent cannot tell what it
	// did; the node stays cordoned until a human repairs it. Never usable.
	ReasonDegraded = "InPlaceUpdateDegraded"
	// ReasonPlanNotPickedUp: the node's agent never picked up the plan; the plan was
	// withdrawn and the node put back in service unchanged.
	ReasonPlanNotPickedUp = "InPlacePlanNotPickedUp"
	// ReasonDeadlineExceeded: a phase of the node's update passed its deadline (the
	// policy's deadlines); the message names the phase, since when and what was last
	// seen of the node. Before cordon the node is untouched; after it, it stays
	// cordoned until a human looks (or MachineHealthCheck replaces it).
	ReasonDeadlineExceeded = "InPlaceUpdateDeadlineExceeded"
	// ReasonWaitingForControlPlane: the update of a worker Machine raises its
	// kubelet's version and waits, before cordon, for the cluster's control plane
	// to be at that version (every control-plane Machine asks for it and none is
	// being updated, every control-plane node's kubelet reports it): a kubelet must
	// never be newer than an API server it may reach. The node serves, unchanged
	// (its plan may be staged meanwhile); the update starts on its own.
	ReasonWaitingForControlPlane = "WaitingForControlPlane"
)

// FailedReason reports whether a Machine's InPlaceUpdate condition reason says its
// update failed: rolled back, failed, degraded, never picked up, or past a deadline.
// `capi-inplace status` and the FleetRollout controller judge a Machine by it.
func FailedReason(reason string) bool {
	switch reason {
	case ReasonFailed, ReasonRolledBack, ReasonDegraded, ReasonPlanNotPickedUp, ReasonDeadlineExceeded:
		return true
	}
	return false
}

// Event reasons recorded on Machines.
const (
	EventDrainStarted     = "InPlaceDrainStarted"
	EventDrainBlocked     = "InPlaceDrainBlocked"
	EventPlanPublished    = "InPlacePlanPublished"
	EventUpdateSucceeded  = "InPlaceUpdateSucceeded"
	EventUpdateRolledBack = "InPlaceUpdateRolledBack"
	EventUpdateFailed     = "InPlaceUpdateFailed"
	EventNodeDegraded     = "InPlaceNodeDegraded"
	EventPlanNotPickedUp  = "InPlacePlanNotPickedUp"
	EventDeadlineExceeded = "InPlaceUpdateDeadlineExceeded"
	// EventWaitingForControlPlane: a worker's update began waiting for the
	// control plane (ReasonWaitingForControlPlane); recorded when the Machine's
	// condition takes that reason, not on every call.
	EventWaitingForControlPlane = "InPlaceWaitingForControlPlane"
)
