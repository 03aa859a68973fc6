// Package nodeplan builds the protocol.NodePlan for one Machine from the desired
// Machine, its KubeadmConfig and the OS image the policy resolved for its
// infrastructure machine, plus a few facts observed in the workload cluster.
//
// Everything here is pure: the caller fetches the Secrets the KubeadmConfig
// references (secretbudget.Refs, under its budget) and the node facts, then calls
// Build. No client, no context, no clock.
//
// Invariants:
//   - The same inputs always give the same plan, and so the same plan hash: this is
//     what makes the coordinator idempotent.
//   - The kubeadm action depends on observed facts (the node's kubelet version, whether
//     another control-plane node already reached the target) that change as the update
//     progresses. Pin keeps the action of an already published plan whose desired
//     content is otherwise unchanged, so the hash of an update never moves under its feet.
//   - Plans are published sealed to the node's key (publish.go: AgentKey, Seal,
//     Holds), so only that node can read its files and password hashes. The
//     coordinator cannot open what it published: PinPublished pins against the
//     clear pin in the sealed plan's header instead.
//   - File contents are fully resolved (Secret sources read, encodings decoded,
//     templates rendered): the agent never needs management-cluster access.
//
// Imports: standard library, api/v1alpha1, internal/protocol and the Cluster API
// API types (core and kubeadm bootstrap v1beta2).
package nodeplan
