package machinestate

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// State is where a Machine stands against the version it asks for.
type State string

const (
	// Failed: the Machine's last in-place update failed (rolled back, failed,
	// degraded, never picked up, past a deadline: inplacev1.FailedReason).
	Failed State = "Failed"
	// Deleting: the Machine is going away; it neither blocks nor proves anything.
	Deleting State = "Deleting"
	// DrainBlocked: capi-inplace's drain of the Machine's node is blocked (a
	// PodDisruptionBudget or a pod). The update is in progress, held where a
	// person may have to act.
	DrainBlocked State = "DrainBlocked"
	// WaitingForControlPlane: Cluster API is updating the (worker) Machine and
	// capi-inplace holds the update before cordon until the cluster's control
	// plane is at the version it raises the kubelet to (the InPlaceUpdate
	// condition's reason inplacev1.ReasonWaitingForControlPlane). The node serves,
	// unchanged; the update starts on its own. In progress, as Updating is.
	WaitingForControlPlane State = "WaitingForControlPlane"
	// Staged: Cluster API is updating the Machine and capi-inplace holds the
	// update before cordon, its plan staged on the node ahead of a closed
	// maintenance window (the coordinator's phase record on the Machine says
	// protocol.UpdatePhaseStaged). The node serves, unchanged; the window will
	// only switch it. In progress, as Updating is.
	Staged State = "Staged"
	// Updating: Cluster API (its update-in-progress annotation or its Updating
	// condition) or capi-inplace (InPlaceUpdate InProgress) is updating the Machine.
	Updating State = "Updating"
	// Unreported: the Machine's node has not reported a kubelet version (no
	// status.nodeInfo yet), so nothing proves which version it runs.
	Unreported State = "Unreported"
	// Outdated: the node's kubelet runs another release than the Machine asks for
	// and nothing is updating it.
	Outdated State = "Outdated"
	// UpToDate: the node's kubelet runs the release the Machine asks for and
	// nothing is updating it.
	UpToDate State = "UpToDate"
)

// InProgress reports whether an update of the Machine is under way (Updating,
// DrainBlocked, WaitingForControlPlane, or Staged and waiting for its window).
func (s State) InProgress() bool {
	return s == Updating || s == DrainBlocked || s == WaitingForControlPlane || s == Staged
}

// StagedAndWaiting is the one rule for a Cluster whose update is staged and
// waits for a maintenance window, given its Machines' states: at least one
// Machine is Staged and none is Failed, Updating, DrainBlocked or
// WaitingForControlPlane (a Machine still staging, past its cordon, or waiting
// for a control plane under way, is work under way, not waiting). Machines
// Cluster API has not started yet or is done with (Outdated, Unreported,
// UpToDate) and those going away neither make nor break it.
func StagedAndWaiting(states []State) bool {
	staged := false
	for _, s := range states {
		switch s {
		case Staged:
			staged = true
		case Failed, Updating, DrainBlocked, WaitingForControlPlane:
			return false
		}
	}
	return staged
}

// Verdict is the rule's answer for one Machine.
type Verdict struct {
	State State
	// Reason and Message are the Machine's InPlaceUpdate condition's when State is
	// Failed, DrainBlocked or WaitingForControlPlane, so that a view can say why.
	Reason, Message string
}

// Of judges a Machine: the first that holds of Failed, Deleting, DrainBlocked,
// WaitingForControlPlane, Staged, Updating, Unreported, then UpToDate or Outdated by the node's kubelet version
// against spec.version (the same release, build metadata aside).
func Of(m *clusterv1.Machine) Verdict {
	cond := meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition)
	switch {
	case cond != nil && inplacev1.FailedReason(cond.Reason):
		return Verdict{State: Failed, Reason: cond.Reason, Message: cond.Message}
	case !m.DeletionTimestamp.IsZero():
		return Verdict{State: Deleting}
	case cond != nil && cond.Reason == inplacev1.ReasonDrainBlocked:
		return Verdict{State: DrainBlocked, Reason: cond.Reason, Message: cond.Message}
	case updating(m) && cond != nil && cond.Reason == inplacev1.ReasonWaitingForControlPlane:
		// Before Staged: a plan staged while waiting for the control plane waits
		// for the control plane, not for a window.
		return Verdict{State: WaitingForControlPlane, Reason: cond.Reason, Message: cond.Message}
	case updating(m) && stagedAhead(m):
		return Verdict{State: Staged}
	case updating(m) || (cond != nil && cond.Reason == inplacev1.ReasonInProgress):
		return Verdict{State: Updating}
	case m.Status.NodeInfo == nil || m.Status.NodeInfo.KubeletVersion == "":
		return Verdict{State: Unreported}
	case protocol.SameRelease(m.Status.NodeInfo.KubeletVersion, m.Spec.Version):
		return Verdict{State: UpToDate}
	}
	return Verdict{State: Outdated}
}

// Reached reports whether the Machine asks for target and is UpToDate: its node
// reported the target's kubelet and no update is in progress.
func Reached(m *clusterv1.Machine, target string) bool {
	return protocol.SameRelease(m.Spec.Version, target) && Of(m).State == UpToDate
}

// updating reports whether Cluster API has an in-place update of the Machine in
// progress. Cluster API marks the Machine with the annotation when it starts the
// update and its Machine controller sets the Updating condition on a later pass,
// so either one suffices.
func updating(m *clusterv1.Machine) bool {
	if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
		return true
	}
	return meta.IsStatusConditionTrue(m.Status.Conditions, clusterv1.MachineUpdatingCondition)
}

// stagedAhead reports whether the coordinator's phase record on the Machine says
// its update is staged and waits for a maintenance window. The record outlives
// the update (it is not cleared when the update ends), so it counts only while
// Cluster API is updating the Machine, and not when it is older than Cluster
// API's start of this update (a record of an update Cluster API gave up); the
// coordinator moves it on at the window's opening (cordon) and when the plan
// changes.
func stagedAhead(m *clusterv1.Machine) bool {
	rec := protocol.DecodePhaseRecord(m.Annotations[inplacev1.UpdatePhaseAnnotation])
	if rec.Phase != protocol.UpdatePhaseStaged {
		return false
	}
	c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineUpdatingCondition)
	return c == nil || c.Status != metav1.ConditionTrue || !c.LastTransitionTime.After(rec.Since)
}
