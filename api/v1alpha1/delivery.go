package v1alpha1

// Node annotations of artifact staging: the coordinator asks the agent to stage a
// plan before it cordons the node, and the agent reports its progress.
const (
	// StagePlanAnnotation on a Node holds the hash of the plan whose artifacts the
	// agent must fetch and verify now, while the node still serves. The plan itself
	// is in the node's plan Secret, as for DesiredPlanAnnotation.
	StagePlanAnnotation = GroupName + "/stage-plan"

	// StagingStatusAnnotation on a Node holds the agent's protocol.StagingStatus
	// (JSON) for the plan of StagePlanAnnotation.
	StagingStatusAnnotation = GroupName + "/staging"

	// StageDeadlineAnnotation on a Node holds the time (RFC 3339) by which the plan
	// of StagePlanAnnotation must be staged: the coordinator writes it with the
	// request and fails the update, the node untouched, once it passes; the agent
	// stops staging then.
	StageDeadlineAnnotation = GroupName + "/stage-deadline"
)

// EventStagingFailed is the Machine Event of a node that could not stage its plan
// (it was not cordoned).
const EventStagingFailed = "InPlaceStagingFailed"
