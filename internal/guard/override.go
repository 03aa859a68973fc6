package guard

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// The allow-replace override admits one change. On any object it is the write that sets
// or changes the value (OverrideOf). A Cluster's value also admits the writes the
// topology controller derives from the Cluster's topology it was set with, and nothing
// later; the guard keeps no state, so two rules bind the value to that topology:
//   - staleOverride: a later Cluster.spec.topology write that keeps the stored value is
//     refused until it removes the value or sets a new one, so a value on a Cluster was
//     always set with the Cluster's current topology;
//   - clusterOverride: once the topology controller reports that topology reconciled
//     (TopologyReconciled True at the Cluster's generation), the value admits no derived
//     write (a ClusterClass change rolls the Cluster out again, judged normally).

// staleOverride reports whether a Cluster write changes spec.topology while it keeps a
// stored AllowReplaceAnnotation value.
func staleOverride(old, written *unstructured.Unstructured) bool {
	v := old.GetAnnotations()[inplacev1.AllowReplaceAnnotation]
	return written.GetKind() == "Cluster" && v != "" && written.GetAnnotations()[inplacev1.AllowReplaceAnnotation] == v &&
		written.GetAnnotations()[inplacev1.GuardAnnotation] != inplacev1.GuardDisabled && specChanged("Cluster", old, written)
}

// staleOverrideMessage is the refusal of a stale value.
func staleOverrideMessage(object, value string) string {
	return fmt.Sprintf("capi-inplace guard: this change to %s changes spec.topology but keeps annotation %s=%q, which was set for an earlier change and admits only that one: "+
		"remove the annotation in this write (the change is then judged in-place as usual), or set a new value to allow this change's replacements",
		object, inplacev1.AllowReplaceAnnotation, value)
}

// clusterOverride returns the Cluster's AllowReplaceAnnotation value while it admits the
// topology controller's derived writes: until the topology it was set with is
// reconciled.
func clusterOverride(c *clusterv1.Cluster) string {
	v := c.Annotations[inplacev1.AllowReplaceAnnotation]
	if v == "" {
		return ""
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition)
	if cond != nil && cond.Status == "True" && cond.ObservedGeneration == c.Generation {
		return ""
	}
	return v
}

// CauseStaleOverride is the refusal-metric reason of a stale AllowReplaceAnnotation
// value (not a reason to replace a Machine, so not one of preview's cause kinds).
const CauseStaleOverride preview.CauseKind = "stale-override"
