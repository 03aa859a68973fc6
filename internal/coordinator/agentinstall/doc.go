// Package agentinstall describes the node agent's footprint in a workload cluster
// (Namespace, ServiceAccount, least-privilege RBAC, a ValidatingAdmissionPolicy that
// confines each agent to its own Node, and the DaemonSet) as Go objects, and installs
// it with server-side apply (field manager "capi-inplace") when it is missing or
// outdated.
//
// "Outdated" is decided by a content hash of the rendered objects, stored as an
// annotation on the DaemonSet: one GET per call when nothing changed.
//
// Least privilege, and how plans stay node-private: RBAC lets the agent read Secrets
// in capi-inplace-system only, get/list/watch/patch Nodes, get kube-system's
// pods (the control-plane mirror pods), and list pods only when the cluster has
// a CEL gate (Config.CELGates, set by the coordinator from the policy).
// Admission (the policy here) then refuses any Node write by the agent's service
// account unless the Node is the one named by the token's node-name claim
// (userInfo.extra["authentication.kubernetes.io/node-name"], set for pod-bound
// service account tokens) and unless the only change is to the agent's own
// annotations (AgentAnnotations: current-plan, state, status, agent-key, staging).
// The same policy refuses any change to those annotations by anyone else, through
// nodes and nodes/status, on create and update (a CNI DaemonSet's token may patch
// nodes/status on every node): only an identity that may patch the policy's
// binding, and so could switch it off, is let through, which the coordinator with
// the cluster's admin credentials is. Guarded tells the coordinator whether the
// policy was in force, so that it takes a node's report as done only then.
//
// Reads cannot be confined the same way: admission never sees get/list/watch, and
// RBAC cannot say "the node's own Secret" for one service account shared by every
// node (that would take a Role, a ServiceAccount and a DaemonSet per node, kept in
// step with the Nodes). So plans are confidential by sealing instead: each agent
// generates an X25519 key on its host (0600 in the agent's state directory), and
// publishes the public half in its own Node's agent-key annotation, which the policy
// lets only that node's agent write; the coordinator seals each plan to that key
// (protocol.SealPlan). Any agent can fetch any plan Secret, and only the node that
// holds the private key can open it. The agent cannot request tokens, so it cannot
// obtain a token bound to another node either.
//
// Imports: api/v1alpha1, k8s.io/api, apimachinery, controller-runtime's client.
package agentinstall
