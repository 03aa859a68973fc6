// Package agentinstall describes the node agent's footprint in a workload cluster
// (Namespace, ServiceAccount, least-privilege RBAC, a ValidatingAdmissionPolicy that
// confines each agent to its own Node, and the DaemonSet) as Go objects, and installs
// it with server-side apply (field manager "capi-inplace") when it is missing or
// outdated.
//
// "Outdated" is decided by a content hash of the rendered objects, stored as an
// annotation on the DaemonSet: one GET per call when nothing changed.
//
// Least privilege, and its honest limit: RBAC lets the agent read Secrets in
// capi-inplace-system only and get/list/watch/patch Nodes. Admission (the policy
// here) then refuses any Node write by the agent's service account unless the Node
// is the one named by the token's node-name claim
// (userInfo.extra["authentication.kubernetes.io/node-name"], set for pod-bound
// service account tokens) and unless the only change is to the agent's own
// annotations (current-plan, state, status). Admission never sees reads: neither a
// ValidatingAdmissionPolicy nor RBAC (all agents share one service account) can stop
// an agent from reading another node's plan Secret. Plans therefore must not carry
// anything a node may not know about its peers; today they carry the same
// KubeadmConfig content every node of a pool gets at bootstrap anyway.
//
// Imports: api/v1alpha1, k8s.io/api, apimachinery, controller-runtime's client.
package agentinstall
