package v1alpha1

// KubeadmControlPlane annotations of the single-node control-plane path (see
// SingleNodeControlPlaneAnnotation). While HoldAnnotation is present, CAPI's
// cluster.x-k8s.io/paused annotation is present too and KubeadmControlPlane does not
// reconcile: capi-inplace updates the control-plane nodes in place, aligns their
// Machines, KubeadmConfigs and infrastructure machines with the KCP's spec, and only
// then removes both annotations.
const (
	// HoldAnnotation marks a KubeadmControlPlane held by capi-inplace. Its value is the
	// hash of the spec fields that make control-plane Machines outdated (the pending
	// target). Added by the admission webhook; removed only by capi-inplace's controller.
	HoldAnnotation = GroupName + "/hold"

	// HoldOperatorPausedAnnotation records that the KubeadmControlPlane already carried
	// cluster.x-k8s.io/paused when the hold began, so that releasing the hold leaves
	// the operator's pause in place.
	HoldOperatorPausedAnnotation = GroupName + "/hold-operator-paused"

	// HoldUpdatingAnnotation names the control-plane Machine whose node is being
	// updated. Written by the controller before the first node update call, removed
	// after the Machine is aligned or its update failed.
	HoldUpdatingAnnotation = GroupName + "/hold-updating"

	// HoldFailedAnnotation is where versions before FailedUpdateAnnotation recorded a
	// failed target on the KubeadmControlPlane. No longer written: the controller reads
	// one it finds as a failure of that target, moves it onto the failed Machine
	// (FailedUpdateAnnotation) and removes it from the KubeadmControlPlane.
	HoldFailedAnnotation = GroupName + "/hold-failed"

	// HoldReleaseAnnotation is how capi-inplace's controller releases a hold: the write
	// that removes HoldAnnotation and the pause carries it, with the value of the
	// HoldAnnotation being released. The webhook lets only such a write drop the hold
	// (every other write gets the hold back) and never stores the annotation itself.
	HoldReleaseAnnotation = GroupName + "/hold-release"
)

// FailedUpdateAnnotation on a control-plane Machine of the single-node path is the
// one record that the Machine's node update to a KubeadmControlPlane target failed,
// kept in the management cluster: JSON {"target": the HoldAnnotation value the update
// was for, "reason": the InPlaceUpdate condition reason of the failure}. While its
// target is the KubeadmControlPlane's current one, the controller does not update the
// Machine again (except to ask whether an update past a deadline committed after all)
// and the hold stays; the Machine's RetryAnnotation, or a spec change that moves the
// target, ends it. Written and removed only by the single-node controller; a cancelled
// update is not recorded.
const FailedUpdateAnnotation = GroupName + "/failed-update"

// Condition reasons of the single-node control-plane path (InPlaceUpdateCondition on
// the KubeadmControlPlane and the Cluster), in addition to the Reason* above.
const (
	// ReasonWaiting: a Machine is not ready for an in-place update yet (no node,
	// deleting, or marked for replacement), so the hold stays and nothing is created.
	ReasonWaiting = "InPlaceUpdateWaiting"
	// ReasonRefused: the planner (the same one the CanUpdate hooks ask) cannot apply a
	// change of the new spec in place, or in-place updates are disabled; the node is not
	// touched, the hold stays (releasing it would make KCP replace the Machine), and
	// the message names each refused field and why.
	ReasonRefused = "InPlaceUpdateRefused"
)

// EventUpdateRefused is the Event on the KubeadmControlPlane and the Machine when the
// planner refuses the new spec (see ReasonRefused).
const EventUpdateRefused = "InPlaceUpdateRefused"

// ReasonReleased: the hold was released without an in-place update because the
// Cluster no longer opts in or the control plane has three or more replicas;
// KubeadmControlPlane's own behaviour applies from here.
const ReasonReleased = "InPlaceUpdateHandedBack"

// SingleNodeOptedIn reports whether a control plane of fewer than three replicas is
// opted into capi-inplace's own in-place path: any of the given annotation sets (the
// Cluster's and its KubeadmControlPlane's) carries SingleNodeControlPlaneAnnotation
// with value "true". The KubeadmControlPlane's own annotation counts alone: for a
// ClusterClass cluster the topology controller puts
// spec.topology.controlPlane.metadata.annotations there, and Cluster API can drop a
// Cluster's annotations (the single-node controller copies the Cluster's opt-in onto
// the KubeadmControlPlane once for that reason). The single-node path, the admission
// guard and `capi-inplace plan` all decide by this one rule.
func SingleNodeOptedIn(annotations ...map[string]string) bool {
	for _, a := range annotations {
		if a[SingleNodeControlPlaneAnnotation] == "true" {
			return true
		}
	}
	return false
}
