package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// FleetRolloutKind is the kind of FleetRollout.
const FleetRolloutKind = "FleetRollout"

// FleetRollout moves many Clusters of the management cluster to one Kubernetes
// version: canaries first, then batches, each batch started only once the one before
// it is done and met its success threshold, with a fleet-wide failure budget that
// halts it. It writes the version where a person would (the Cluster's
// spec.topology.version, or the KubeadmControlPlane and MachineDeployments of a
// Cluster without a ClusterClass), so every write passes the same in-place guard: a
// Cluster whose write the guard refuses is skipped, never replaced.
//
// It is cluster-scoped: its namespaceSelector reaches Clusters in many namespaces,
// so only who may write cluster-wide objects may move them.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fro,categories=capi-inplace
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.target.version`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Batch",type=integer,JSONPath=`.status.currentBatch.index`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.counts.total`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.counts.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.counts.failed`
// +kubebuilder:printcolumn:name="Skipped",type=integer,JSONPath=`.status.counts.skipped`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FleetRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what to change, on which Clusters, how fast.
	// +required
	Spec FleetRolloutSpec `json:"spec"`
	// status is the rollout's progress, written only by capi-inplace.
	// +optional
	Status FleetRolloutStatus `json:"status,omitempty"`
}

// FleetRolloutList is a list of FleetRollouts.
//
// +kubebuilder:object:root=true
type FleetRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetRollout `json:"items"`
}

// FleetRolloutSpec is what a FleetRollout changes, where and how fast.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.abort) || !oldSelf.abort || (has(self.abort) && self.abort)",message="abort cannot be undone: create a new FleetRollout"
// +kubebuilder:validation:XValidation:rule="self.target == oldSelf.target",message="target is immutable: create a new FleetRollout"
// +kubebuilder:validation:XValidation:rule="!has(self.strategy) || !has(self.strategy.approval) || self.strategy.approval.mode != 'AfterCanaries' || has(self.canary)",message="strategy.approval.mode AfterCanaries needs canary"
type FleetRolloutSpec struct {
	// clusterSelector selects the Clusters to move by their labels. It must hold at
	// least one requirement: an empty selector would select every Cluster.
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="clusterSelector must hold at least one requirement"
	ClusterSelector metav1.LabelSelector `json:"clusterSelector"`

	// namespaceSelector selects, by their labels, the namespaces whose Clusters
	// clusterSelector chooses from; omitted, every namespace. Only Clusters the
	// in-place guard covers (namespace labelled inplace.capi-inplace.dev/enabled=true,
	// guard not disabled on the Cluster) are moved; the others are listed as skipped
	// (NotGuarded).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// canary names the Clusters moved first, alone: the rollout goes on to the first
	// batch only when every canary succeeded, and halts otherwise.
	// +optional
	Canary *FleetCanary `json:"canary,omitempty"`

	// target is the change applied to every selected Cluster.
	// +required
	Target FleetTarget `json:"target"`

	// strategy is how fast the rollout moves and when it halts.
	// +optional
	Strategy FleetStrategy `json:"strategy,omitempty"`

	// paused, when true, starts no further Cluster; Clusters already updating go
	// on. Set it back to false to resume.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// abort, when true, ends the rollout: no further Cluster starts, Clusters
	// already updating finish or roll back by their own rules, and Clusters not
	// started are left alone (skipped, reason Aborted). It cannot be undone.
	// +optional
	Abort bool `json:"abort,omitempty"`

	// approvedBatch is the highest batch the operator approved to start, when
	// strategy.approval asks for approval: a batch that waits for approval starts
	// once approvedBatch reaches its index (the canaries are batch 0, the first
	// batch after them 1). Raise it to approve the next batch, for example with
	// kubectl patch fleetrollout <name> --type merge -p '{"spec":{"approvedBatch":2}}';
	// setting the same value again changes nothing. Lowering it withdraws the
	// approval of batches not started yet; started batches go on.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	ApprovedBatch *int32 `json:"approvedBatch,omitempty"`
}

// FleetCanary chooses the canary Clusters: by name, or the first count of the
// rollout's order (namespace, then name) among the Clusters that need the change.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.clusters) && size(self.clusters) > 0 && has(self.count))",message="set canary.clusters or canary.count, not both"
type FleetCanary struct {
	// clusters are the canaries as "namespace/name". A name the selectors do not
	// select is listed as skipped (NotSelected); like any canary that did not
	// succeed, it halts the rollout before the first batch.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=317
	Clusters []string `json:"clusters,omitempty"`

	// count is how many Clusters are canaries, taken first in the rollout's order.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Count *int32 `json:"count,omitempty"`
}

// FleetTarget is the change a FleetRollout applies to each Cluster.
type FleetTarget struct {
	// version is the Kubernetes version every Machine of each Cluster reaches: for a
	// ClusterClass Cluster it is written to spec.topology.version; otherwise to its
	// KubeadmControlPlane's spec.version and, once every control-plane Machine
	// reached it, to each MachineDeployment's spec.template.spec.version.
	// +required
	// +kubebuilder:validation:Pattern=`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+].*)?$`
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
}

// FleetTimeoutAction is what happens when a Cluster passes the per-cluster timeout.
//
// +kubebuilder:validation:Enum=Abort;Skip
type FleetTimeoutAction string

const (
	// FleetTimeoutAbort fails the Cluster (cause Timeout) and halts the rollout.
	FleetTimeoutAbort FleetTimeoutAction = "Abort"
	// FleetTimeoutSkip skips the Cluster (reason Timeout): its batch no longer waits
	// for it, and it counts neither as a success nor as a failure.
	FleetTimeoutSkip FleetTimeoutAction = "Skip"
)

// FleetStrategy is how fast a FleetRollout moves and when it halts. A halt is
// decided afresh on every pass from the spec and the Clusters' states: raising
// maxFailures or lowering successThreshold lets a halted rollout go on.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.batchSize) && has(self.batchSizes))",message="set batchSize or batchSizes, not both"
type FleetStrategy struct {
	// batchSize is how many Clusters each batch after the canaries holds: a count
	// ("20") or a percentage of the Clusters after the canaries ("10%", rounded up).
	// Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="batchSize is a count of at least 1 or a percentage from 1% to 100%"
	BatchSize *intstr.IntOrString `json:"batchSize,omitempty"`

	// batchSizes are growing batches: the size of batch 1, 2, ... after the
	// canaries in turn, each a count or a percentage of the Clusters after the
	// canaries (rounded up), as batchSize; batches past the list's end take its
	// last size. [1, 5, "25%"] over 300 Clusters makes batches of 1, 5, then 75
	// until every Cluster is in one. Exclusive with batchSize.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:XIntOrString
	// +kubebuilder:validation:items:MaxLength=4
	// +kubebuilder:validation:items:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="each of batchSizes is a count of at least 1 or a percentage from 1% to 100%"
	BatchSizes []intstr.IntOrString `json:"batchSizes,omitempty"`

	// maxConcurrent caps how many Clusters update at once, across the fleet; a
	// batch larger than it starts its Clusters as others finish. Omitted: a whole
	// batch at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxConcurrent *int32 `json:"maxConcurrent,omitempty"`

	// successThreshold is how many of a finished batch's Clusters must have
	// succeeded for the next batch to start: a count or a percentage ("90%",
	// rounded up) of the batch's Clusters that were started (skipped ones do not
	// count). Default 100%. Canaries must always all succeed.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="successThreshold is a count of at least 0 or a percentage from 0% to 100%"
	SuccessThreshold *intstr.IntOrString `json:"successThreshold,omitempty"`

	// perClusterTimeout bounds how long one Cluster may take from its start to
	// every Machine at the target version; onTimeout says what then happens.
	// Omitted: no bound.
	// +optional
	PerClusterTimeout *metav1.Duration `json:"perClusterTimeout,omitempty"`

	// onTimeout is Abort (the Cluster fails and the rollout halts) or Skip (the
	// Cluster is skipped and its batch goes on without it). Default Abort.
	// +optional
	// +kubebuilder:default=Abort
	OnTimeout FleetTimeoutAction `json:"onTimeout,omitempty"`

	// maxFailures is the fleet-wide failure budget: the rollout halts once this
	// many Clusters failed (canaries included). Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxFailures *int32 `json:"maxFailures,omitempty"`

	// spreadBy caps how many Clusters sharing the value of a Cluster label (a
	// site, a zone) update at once, on top of maxConcurrent. Omitted: no cap.
	// +optional
	SpreadBy *FleetSpread `json:"spreadBy,omitempty"`

	// approval makes the rollout wait for the operator between batches: a finished
	// batch's successor starts only once spec.approvedBatch reaches its index.
	// Omitted: each batch starts as soon as the one before it is done.
	// +optional
	Approval *FleetApproval `json:"approval,omitempty"`
}

// FleetSpread caps the Clusters updating at once per value of a Cluster label.
type FleetSpread struct {
	// labelKey is the Cluster label whose value groups Clusters, for example
	// topology.kubernetes.io/zone or a site label. Clusters without the label form
	// one group of their own, capped like any value: nothing tells them apart.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	LabelKey string `json:"labelKey"`

	// maxConcurrent is how many Clusters with the same value of labelKey may update
	// at once. Default 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxConcurrent int32 `json:"maxConcurrent,omitempty"`
}

// FleetApprovalMode is when a FleetRollout waits for the operator's approval.
//
// +kubebuilder:validation:Enum=EveryBatch;AfterCanaries
type FleetApprovalMode string

const (
	// FleetApprovalEveryBatch waits after every batch, the canaries' included.
	FleetApprovalEveryBatch FleetApprovalMode = "EveryBatch"
	// FleetApprovalAfterCanaries waits once, after the canaries; later batches
	// follow each other without approval.
	FleetApprovalAfterCanaries FleetApprovalMode = "AfterCanaries"
)

// FleetApproval is when a FleetRollout waits for the operator between batches.
// The first batch the rollout starts needs no approval: creating the rollout
// approves it. The approval is spec.approvedBatch, a spec field rather than an
// annotation: the API validates it, raising it bumps the generation (which wakes
// the controller at once and shows in status.observedGeneration), and the audit
// log records who approved which batch as a write of the spec.
type FleetApproval struct {
	// mode is EveryBatch (wait after each batch, the canaries' included) or
	// AfterCanaries (wait once, after the canaries).
	// +required
	Mode FleetApprovalMode `json:"mode"`
}

// FleetRolloutPhase summarises a FleetRollout.
type FleetRolloutPhase string

const (
	// FleetPhaseProgressing: Clusters are updating or about to start.
	FleetPhaseProgressing FleetRolloutPhase = "Progressing"
	// FleetPhasePaused: spec.paused; Clusters already updating go on.
	FleetPhasePaused FleetRolloutPhase = "Paused"
	// FleetPhaseWaitingForApproval: the current batch is done and the next one
	// waits for spec.approvedBatch to reach it.
	FleetPhaseWaitingForApproval FleetRolloutPhase = "WaitingForApproval"
	// FleetPhaseHalted: the failure budget, a success threshold, a canary or a
	// timeout (onTimeout Abort) stopped further starts; the Halted condition says which.
	FleetPhaseHalted FleetRolloutPhase = "Halted"
	// FleetPhaseAborted: spec.abort; no further start.
	FleetPhaseAborted FleetRolloutPhase = "Aborted"
	// FleetPhaseCompleted: every selected Cluster succeeded, failed or was skipped,
	// and no halt holds.
	FleetPhaseCompleted FleetRolloutPhase = "Completed"
)

// FleetClusterState is one Cluster's state in a FleetRollout.
type FleetClusterState string

const (
	// FleetClusterPending: not started yet.
	FleetClusterPending FleetClusterState = "Pending"
	// FleetClusterUpdating: the target was written; not every Machine reached it.
	FleetClusterUpdating FleetClusterState = "Updating"
	// FleetClusterSucceeded: every Machine reached the target.
	FleetClusterSucceeded FleetClusterState = "Succeeded"
	// FleetClusterFailed: a Machine's in-place update failed, the Cluster halted,
	// or it timed out with onTimeout Abort; reason and message say which.
	FleetClusterFailed FleetClusterState = "Failed"
	// FleetClusterSkipped: never started or no longer waited for; reason says why.
	FleetClusterSkipped FleetClusterState = "Skipped"
)

// Reasons of a Cluster's state in FleetClusterStatus.
const (
	// FleetReasonAlreadyAtTarget: succeeded without a write, every Machine was at
	// the target already.
	FleetReasonAlreadyAtTarget = "AlreadyAtTarget"
	// FleetReasonWouldReplace: an admission webhook (the in-place guard) refused the
	// write; message is the webhook's. Never retried.
	FleetReasonWouldReplace = "WouldReplace"
	// FleetReasonWriteInvalid: the API server refused the write as invalid (a
	// validating webhook of Cluster API, a version skip); message says why.
	FleetReasonWriteInvalid = "WriteInvalid"
	// FleetReasonNotGuarded: the Cluster's namespace is not labelled
	// inplace.capi-inplace.dev/enabled=true or its guard is disabled, so nothing
	// would stop Cluster API from replacing its Machines.
	FleetReasonNotGuarded = "NotGuarded"
	// FleetReasonUnsupported: the Cluster has neither a topology nor a
	// KubeadmControlPlane.
	FleetReasonUnsupported = "Unsupported"
	// FleetReasonNotSelected: the Cluster left the selection (or a named canary was
	// never in it) before it was started.
	FleetReasonNotSelected = "NotSelected"
	// FleetReasonAborted: the rollout was aborted before the Cluster started.
	FleetReasonAborted = "Aborted"
	// FleetReasonTimeout: the Cluster passed perClusterTimeout.
	FleetReasonTimeout = "Timeout"
	// FleetReasonMachineFailed: a Machine's InPlaceUpdate condition reports a
	// failure (message names the Machine and its reason).
	FleetReasonMachineFailed = "MachineFailed"
	// FleetReasonClusterHalted: the Cluster's own fleet controls halted its updates.
	FleetReasonClusterHalted = "ClusterHalted"
	// FleetReasonTargetReverted: the Cluster no longer asks for the target after
	// the rollout wrote it (someone changed its version back).
	FleetReasonTargetReverted = "TargetReverted"
	// FleetReasonHeldBySpread: a Pending Cluster of the current batch waits because
	// strategy.spreadBy's cap for its label value is reached (message names the
	// value); it starts when a Cluster of that value finishes.
	FleetReasonHeldBySpread = "HeldBySpread"
	// FleetReasonStagedForWindow: an Updating Cluster's update is staged on its
	// nodes ahead of a closed maintenance window and waits for it, nothing else
	// of it under way (the Machines' phase records, internal/fleet/machinestate);
	// the window will only switch the nodes. Decided afresh on every pass.
	FleetReasonStagedForWindow = "StagedForWindow"
)

// FleetClusterStatus is one Cluster's state in a FleetRollout.
type FleetClusterStatus struct {
	// namespace of the Cluster.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name of the Cluster.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// batch is the Cluster's batch: 0 holds the canaries, 1 the first batch after
	// them. Final once the batch started; before, where the Cluster would go.
	// Absent for a Cluster in no batch (already at the target, or skipped before
	// one was planned for it).
	// +optional
	Batch *int32 `json:"batch,omitempty"`
	// state is Pending, Updating, Succeeded, Failed or Skipped.
	// +required
	// +kubebuilder:validation:Enum=Pending;Updating;Succeeded;Failed;Skipped
	State FleetClusterState `json:"state"`
	// reason is why a Cluster failed or was skipped, why a Pending Cluster of
	// the current batch waits (HeldBySpread), or that an Updating Cluster is
	// staged and waits for its maintenance window (StagedForWindow), CamelCase.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
	// message is a human-readable detail of reason.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// startedAt is when the rollout wrote the target to the Cluster (or found it
	// written); perClusterTimeout counts from it.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// finishedAt is when the Cluster reached Succeeded, Failed or Skipped.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// FleetCounts count a FleetRollout's Clusters by state.
type FleetCounts struct {
	// total is every Cluster the rollout tracks.
	// +optional
	// +kubebuilder:default=0
	Total int32 `json:"total"`
	// pending Clusters are not started yet.
	// +optional
	// +kubebuilder:default=0
	Pending int32 `json:"pending"`
	// updating Clusters were started and have not finished.
	// +optional
	// +kubebuilder:default=0
	Updating int32 `json:"updating"`
	// succeeded Clusters have every Machine at the target.
	// +optional
	// +kubebuilder:default=0
	Succeeded int32 `json:"succeeded"`
	// failed Clusters count against maxFailures.
	// +optional
	// +kubebuilder:default=0
	Failed int32 `json:"failed"`
	// skipped Clusters were never started or no longer waited for.
	// +optional
	// +kubebuilder:default=0
	Skipped int32 `json:"skipped"`
	// heldBySpread are the pending Clusters of the current batch that wait because
	// strategy.spreadBy's cap for their label value is reached (reason
	// HeldBySpread); they are counted in pending too.
	// +optional
	// +kubebuilder:default=0
	HeldBySpread int32 `json:"heldBySpread"`
	// stagedForWindow are the updating Clusters whose update is staged on their
	// nodes ahead of a closed maintenance window and waits for it (reason
	// StagedForWindow); they are counted in updating too.
	// +optional
	// +kubebuilder:default=0
	StagedForWindow int32 `json:"stagedForWindow"`
}

// FleetBatchStatus is the batch a FleetRollout is working on.
type FleetBatchStatus struct {
	// index is the batch's number: 0 for the canaries, 1 for the first batch after them.
	Index int32 `json:"index"`
	// canary is true for the canaries' batch.
	// +optional
	Canary bool `json:"canary,omitempty"`
	// counts are the batch's Clusters by state.
	Counts FleetCounts `json:"counts"`
	// required is how many of the batch's started Clusters must succeed for the next
	// batch to start, as of now (for the canaries: all of them).
	Required int32 `json:"required"`
	// startedAt is when the batch's first Cluster started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
}

// Event reasons recorded on a FleetRollout, each once per transition (never on
// every pass). The action of an Event carries the detail a reason has: the halt
// reason (FleetHalt*) of EventRolloutHalted and EventRolloutHaltLifted, the
// Cluster's reason (FleetReason*) of EventClusterFailed and EventClusterSkipped.
const (
	// EventBatchStarted: the rollout moved to a batch (the canaries or batch N).
	EventBatchStarted = "FleetBatchStarted"
	// EventRolloutHalted: a halt began or its reason changed.
	EventRolloutHalted = "FleetRolloutHalted"
	// EventRolloutHaltLifted: the Halted condition turned False (the operator
	// changed the spec so that the halt no longer holds, or the Clusters' states
	// no longer meet it); its action is the reason of the halt that lifted.
	EventRolloutHaltLifted = "FleetRolloutHaltLifted"
	// EventRolloutCompleted: every Cluster finished.
	EventRolloutCompleted = "FleetRolloutCompleted"
	// EventRolloutAborted: spec.abort was set.
	EventRolloutAborted = "FleetRolloutAborted"
	// EventClusterFailed: a Cluster of the rollout failed.
	EventClusterFailed = "FleetClusterFailed"
	// EventClusterSkipped: a Cluster of the rollout was skipped.
	EventClusterSkipped = "FleetClusterSkipped"
)

// Condition types of a FleetRollout.
const (
	// FleetProgressingCondition is True while the rollout may start Clusters or
	// waits for Clusters it started.
	FleetProgressingCondition = "Progressing"
	// FleetHaltedCondition is True while a halt stops further starts (reason:
	// FleetHalt* below).
	FleetHaltedCondition = "Halted"
	// FleetCompletedCondition is True once every Cluster finished.
	FleetCompletedCondition = "Completed"
)

// Reasons of a FleetRollout's conditions.
const (
	FleetHaltFailureBudget    = "FailureBudgetExhausted"
	FleetHaltSuccessThreshold = "SuccessThresholdMissed"
	FleetHaltCanaryFailed     = "CanaryFailed"
	FleetHaltTimeout          = "ClusterTimedOut"
	FleetReasonNotHalted      = "NotHalted"
	FleetReasonProgressing    = "BatchInProgress"
	FleetReasonPaused         = "Paused"
	FleetReasonHalted         = "Halted"
	FleetReasonRolloutAborted = "Aborted"
	FleetReasonCompleted      = "AllClustersFinished"
	FleetReasonInProgress     = "ClustersInProgress"

	// FleetReasonWaitingForApproval: Progressing is False until spec.approvedBatch
	// reaches the batch the message names (status.waitingForApproval).
	FleetReasonWaitingForApproval = "WaitingForApproval"
)

// FleetRolloutStatus is a FleetRollout's progress.
type FleetRolloutStatus struct {
	// observedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// phase is Progressing, Paused, WaitingForApproval, Halted, Aborted or Completed.
	// +optional
	// +kubebuilder:validation:Enum=Progressing;Paused;WaitingForApproval;Halted;Aborted;Completed
	Phase FleetRolloutPhase `json:"phase,omitempty"`
	// counts are the rollout's Clusters by state.
	// +optional
	Counts FleetCounts `json:"counts,omitempty"`
	// batches is how many batches the rollout has after the canaries: the
	// last batch is "batch <batches> of <batches>". The canaries are batch 0 and
	// not counted here (currentBatch.canary marks them).
	// +optional
	Batches int32 `json:"batches,omitempty"`
	// currentBatch is the batch being worked on (after the last, the last); absent
	// before the first started. Batches up to its index keep their Clusters.
	// +optional
	CurrentBatch *FleetBatchStatus `json:"currentBatch,omitempty"`
	// waitingForApproval is the batch that waits for spec.approvedBatch to reach
	// it; absent when none does.
	// +optional
	WaitingForApproval *int32 `json:"waitingForApproval,omitempty"`
	// clusters are every tracked Cluster's state, in the rollout's order (batch,
	// then namespace and name).
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=5000
	Clusters []FleetClusterStatus `json:"clusters,omitempty"`
	// conditions are Progressing, Halted and Completed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
