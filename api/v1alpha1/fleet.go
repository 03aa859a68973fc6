package v1alpha1

// Fleet controls: operator annotations that steer node updates across a cluster,
// and the record the coordinator keeps on the Cluster so that every replica and
// every restart decides from the same state (docs/fleet-controls.md).

// Operator annotations on a Machine (management cluster). Any non-empty value.
const (
	// RetryAnnotation asks the coordinator to try a failed, rolled-back, degraded
	// or not-picked-up node update again: it withdraws the failed plan, clears the
	// agent's verdict on the Node, drops the node from the cluster's failure budget
	// and removes this annotation; the next call starts the update afresh.
	RetryAnnotation = GroupName + "/retry"

	// CancelAnnotation stops a node update that has not reached the agent's first
	// destructive action (no agent status, or Pending, for the plan): the plan is
	// withdrawn, a node we cordoned is uncordoned, and every call answers Failure
	// (cause Cancelled) while the annotation stays. Too late (the agent is staging
	// or applying) the update runs on and the message says so. Remove it to let the
	// update start again. On the single-node path the KubeadmControlPlane stays held
	// and paused, cancelled rather than failed, until then.
	CancelAnnotation = GroupName + "/cancel"
)

// Operator annotations on a Cluster (management cluster).
const (
	// ResumeAnnotation resumes a cluster halted by its failure budget: the
	// coordinator clears the cluster's failure record and removes this annotation.
	ResumeAnnotation = GroupName + "/resume"

	// MaintenanceWindowsAnnotation overrides the policy's maintenance windows for
	// the whole Cluster: "Mon-Fri 22:00-04:00 Europe/Berlin; Sat,Sun 00:00-24:00 UTC"
	// (internal/fleet.ParseWindows). Node updates start only inside an open window.
	MaintenanceWindowsAnnotation = GroupName + "/maintenance-windows"

	// DownloadWindowsAnnotation overrides the policy's download windows for the
	// whole Cluster, in the syntax of MaintenanceWindowsAnnotation: a node update
	// that a closed maintenance window holds begins staging only inside one
	// ("" or absent from both: any time).
	DownloadWindowsAnnotation = GroupName + "/download-windows"
)

// FleetStateAnnotation on a Cluster holds the coordinator's fleet record as JSON
// (internal/fleet.State): failed nodes counted against the failure budget, the
// last node that finished per pool (for soak) and measured update durations (for
// maintenance windows). Written only by the coordinator.
const FleetStateAnnotation = GroupName + "/fleet-state"

// Reasons of the InPlaceUpdate condition on a Cluster (fleet state) and on a
// Machine (cancel).
const (
	ReasonActive       = "InPlaceUpdatesActive"
	ReasonPaused       = "InPlaceUpdatesPaused"
	ReasonHalted       = "InPlaceUpdatesHalted"
	ReasonWindowClosed = "InPlaceMaintenanceWindowClosed"
	ReasonSoaking      = "InPlaceUpdateSoaking"
	ReasonCancelled    = "InPlaceUpdateCancelled"
)

// Event reasons of fleet transitions (on the Cluster) and of operator requests
// (on the Machine).
const (
	EventUpdatesPaused   = "InPlaceUpdatesPaused"
	EventUpdatesHalted   = "InPlaceUpdatesHalted"
	EventUpdatesResumed  = "InPlaceUpdatesResumed"
	EventWindowClosed    = "InPlaceMaintenanceWindowClosed"
	EventSoaking         = "InPlaceUpdateSoaking"
	EventUpdatesActive   = "InPlaceUpdatesActive"
	EventUpdateCancelled = "InPlaceUpdateCancelled"
	EventCancelTooLate   = "InPlaceCancelTooLate"
	EventRetryRequested  = "InPlaceRetryRequested"
	EventNothingToRetry  = "InPlaceNothingToRetry"
	EventFailureCounted  = "InPlaceFailureCounted"
)
