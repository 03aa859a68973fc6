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

	// StageTimeoutAnnotation on a Node holds how long the agent may spend on staging
	// the plan of StagePlanAnnotation (protocol.EncodeStageTimeout, a duration such
	// as "30m0s"), counted on the node's own clock from when it starts. The
	// coordinator writes it with the request and judges its staging deadline on its
	// own clock; never an instant, so the two clocks need not agree.
	StageTimeoutAnnotation = GroupName + "/stage-timeout"
)

// EventStagingFailed is the Machine Event of a node that could not stage its plan
// (it was not cordoned).
const EventStagingFailed = "InPlaceStagingFailed"
