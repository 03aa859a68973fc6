package v1alpha1

// The in-place-only admission guard (internal/guard): on by default for every Cluster in
// a namespace labelled NamespaceEnabledLabel=true, it refuses any write that would make
// Cluster API replace a Machine of that Cluster.
const (
	// AllowReplaceAnnotation, set on the object being written (Cluster,
	// KubeadmControlPlane, MachineDeployment, MachineSet or template) to a value of the
	// operator's choice (a ticket, a reason), lets through the one write that sets or
	// changes it even though it replaces Machines; the guard records an Event with the
	// value, the user and what is replaced. The same value never admits a second
	// change: the next replacement needs a new value. On a Cluster it also admits the
	// writes the topology controller derives from the topology it was set with (its
	// KubeadmControlPlane, MachineDeployments and templates) until the Cluster reports
	// that topology reconciled; a later spec.topology write that keeps the value is
	// refused until it removes it or sets a new one.
	AllowReplaceAnnotation = GroupName + "/allow-replace"

	// GuardAnnotation on a Cluster set to GuardDisabled turns the guard off for that
	// Cluster only. Any other value (or none) leaves it on.
	GuardAnnotation = GroupName + "/guard"

	// GuardDisabled is the value of GuardAnnotation that turns the guard off.
	GuardDisabled = "disabled"
)

// AllowReplaceOf returns the AllowReplaceAnnotation value a write introduces: the new
// object's value when it differs from the old object's, else "" (a value already
// stored has been used by the write that set it). The guard and the single-node hold
// webhook admit a replacing write by this one rule.
func AllowReplaceOf(oldAnnotations, newAnnotations map[string]string) string {
	v := newAnnotations[AllowReplaceAnnotation]
	if v == "" || oldAnnotations[AllowReplaceAnnotation] == v {
		return ""
	}
	return v
}

// Event reasons of the guard.
const (
	// EventGuardOverridden is recorded on the written object when AllowReplaceAnnotation
	// let a replacing change through.
	EventGuardOverridden = "InPlaceGuardOverridden"
)
