package fleetrollout

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/machinestate"
	"github.com/capi-inplace/capi-inplace/internal/fleet/rollout"
)

// clusterObjects are what the management cluster holds of one Cluster.
type clusterObjects struct {
	Cluster   *clusterv1.Cluster
	Namespace *corev1.Namespace
	// ControlPlane is the Cluster's KubeadmControlPlane; nil for a ClusterClass
	// Cluster, another control-plane kind, or one not found.
	ControlPlane       *controlplanev1.KubeadmControlPlane
	MachineDeployments []clusterv1.MachineDeployment
	Machines           []clusterv1.Machine
}

// topology reports whether the Cluster's version lives in its topology.
func (o clusterObjects) topology() bool { return o.Cluster.Spec.Topology.IsDefined() }

// observe is what the management cluster shows of one Cluster against target.
func observe(target string, o clusterObjects) rollout.Observation {
	obs := rollout.Observation{Key: rollout.Key{Namespace: o.Cluster.Namespace, Name: o.Cluster.Name}, Progress: rollout.NotStarted, Labels: o.Cluster.Labels}
	switch {
	case o.Namespace == nil || o.Namespace.Labels[inplacev1.NamespaceEnabledLabel] != "true":
		obs.Blocked = inplacev1.FleetReasonNotGuarded
		obs.BlockedMessage = fmt.Sprintf("namespace %s is not labelled %s=true: no guard would keep Cluster API from replacing Machines", o.Cluster.Namespace, inplacev1.NamespaceEnabledLabel)
	case o.Cluster.Annotations[inplacev1.GuardAnnotation] == inplacev1.GuardDisabled:
		obs.Blocked = inplacev1.FleetReasonNotGuarded
		obs.BlockedMessage = fmt.Sprintf("the Cluster's guard is disabled (%s=%s)", inplacev1.GuardAnnotation, inplacev1.GuardDisabled)
	case !o.topology() && o.ControlPlane == nil:
		obs.Blocked = inplacev1.FleetReasonUnsupported
		obs.BlockedMessage = "the Cluster has neither a topology nor a KubeadmControlPlane"
	}

	desired := desiredVersions(o)
	if len(desired) == 0 || !sameVersion(desired[0], target) {
		// The control plane (or the topology) goes first: until it asks for the
		// target, nothing of this rollout happened here.
		return obs
	}
	if c := meta.FindStatusCondition(o.Cluster.Status.Conditions, inplacev1.InPlaceUpdateCondition); c != nil && c.Reason == inplacev1.ReasonHalted {
		obs.Progress, obs.Reason, obs.Message = rollout.Failed, inplacev1.FleetReasonClusterHalted, c.Message
		return obs
	}
	if o.ControlPlane != nil {
		if c := meta.FindStatusCondition(o.ControlPlane.Status.Conditions, inplacev1.InPlaceUpdateCondition); c != nil && c.Reason == inplacev1.ReasonRefused {
			obs.Progress, obs.Reason, obs.Message = rollout.Failed, inplacev1.FleetReasonWouldReplace, c.Message
			return obs
		}
	}
	// A Machine going away neither blocks nor proves anything; at least one other
	// must prove the target.
	proved, reached := 0, true
	states := make([]machinestate.State, 0, len(o.Machines))
	for i := range o.Machines {
		m := &o.Machines[i]
		v := machinestate.Of(m)
		states = append(states, v.State)
		// A failure recorded while the Machine asked for another version belongs
		// to an earlier update.
		if v.State == machinestate.Failed && sameVersion(m.Spec.Version, target) {
			obs.Progress, obs.Reason = rollout.Failed, inplacev1.FleetReasonMachineFailed
			obs.Message = fmt.Sprintf("Machine %s: %s: %s", m.Name, v.Reason, v.Message)
			return obs
		}
		switch {
		case v.State == machinestate.Deleting:
		case machinestate.Reached(m, target):
			proved++
		default:
			reached = false
		}
	}
	reached = reached && proved > 0
	for _, v := range desired {
		if !sameVersion(v, target) {
			reached = false
		}
	}
	if reached {
		obs.Progress = rollout.Reached
	} else {
		obs.Progress = rollout.InProgress
		obs.Staged = machinestate.StagedAndWaiting(states)
	}
	return obs
}

// desiredVersions are the versions the Cluster asks for, the control plane's (or
// the topology's) first.
func desiredVersions(o clusterObjects) []string {
	if o.topology() {
		return []string{o.Cluster.Spec.Topology.Version}
	}
	if o.ControlPlane == nil {
		return nil
	}
	out := []string{o.ControlPlane.Spec.Version}
	for i := range o.MachineDeployments {
		out = append(out, o.MachineDeployments[i].Spec.Template.Spec.Version)
	}
	return out
}

// controlPlaneReached reports whether every control-plane Machine runs target
// (machinestate.Reached; one going away is passed over) and at least one does.
func controlPlaneReached(o clusterObjects, target string) bool {
	n := 0
	for i := range o.Machines {
		m := &o.Machines[i]
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp || !m.DeletionTimestamp.IsZero() {
			continue
		}
		if !machinestate.Reached(m, target) {
			return false
		}
		n++
	}
	return n > 0
}

func sameVersion(a, b string) bool { return strings.TrimPrefix(a, "v") == strings.TrimPrefix(b, "v") }

// selects reports whether sel (nil: everything) matches the labels.
func selects(sel *metav1.LabelSelector, l map[string]string) (bool, error) {
	if sel == nil {
		return true, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(l)), nil
}
