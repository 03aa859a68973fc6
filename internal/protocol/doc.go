// Package protocol defines the versioned envelopes that the coordinator (in the
// management cluster) and the node agent exchange through core objects of the
// workload cluster: the NodePlan, stored in a per-node Secret, and the NodeStatus,
// stored in an annotation on the agent's own Node. It also holds the coordinator's
// phase record of a node update (updatephase.go), an annotation on the Machine in
// the management cluster, which the status views read (a staged update waiting
// for its maintenance window).
//
// Plans are node-private: a plan is published only as a SealedNodePlan, sealed to
// the X25519 key its node's agent generated and published on its Node (seal.go).
// Every agent can read every plan Secret (RBAC cannot say "the node's own" for one
// shared service account, and admission never sees reads), but only the node holding
// the private key can open its plan. The plan hash is computed over the plaintext,
// so a plan keeps its identity when it is sealed again to a new key.
//
// Both envelopes are validated on decode, so a corrupt or foreign object is
// reported as such instead of being half-applied. A plan is identified by the hash
// of its content: the same desired state always yields the same plan hash, which
// is what makes every coordinator call idempotent.
//
// Imports: standard library, api/v1alpha1 and blang/semver (version.go) only. No I/O (sealing reads
// crypto/rand for its one-time key and nonce).
package protocol
