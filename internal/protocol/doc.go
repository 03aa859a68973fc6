// Package protocol defines the versioned envelopes that the coordinator (in the
// management cluster) and the node agent exchange through core objects of the
// workload cluster: the NodePlan, stored in a per-node Secret, and the NodeStatus,
// stored in an annotation on the agent's own Node.
//
// Both envelopes are validated on decode, so a corrupt or foreign object is
// reported as such instead of being half-applied. A plan is identified by the hash
// of its content: the same desired state always yields the same plan hash, which
// is what makes every coordinator call idempotent.
//
// Imports: standard library and api/v1alpha1 only. No I/O.
package protocol
