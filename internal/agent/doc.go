// Package agent is the node agent's top level: it watches its own Node and its
// own plan Secret (by name, through field selectors: never other nodes' objects),
// decides what to do with the desired plan (admit it, reject it, resume it, or
// re-report a finished one), hands the work to the executor, and reports status
// on its own Node's annotations in the background, retrying until the API server
// answers.
//
// Plans are sealed to the node (protocol.SealedPlan): on first start the agent
// generates an X25519 key in its state directory on the host (LoadOrCreateNodeKey,
// 0600), publishes the public half in its Node's agent-key annotation, and opens its
// plan with the private half. A plan sealed to another key (the node's previous one,
// after the host was reinstalled) is refused with a Pending status, reason
// SealedToAnotherKey, until the coordinator seals it to the current key on its next
// call; an unsealed, altered or undecodable plan is rejected (InvalidPlan).
//
// Order of work at start: resume whatever the journal holds (this needs no API
// server: the plan is in the journal), then follow the watches.
//
// Kubernetes access (what the agent's RBAC must allow): get/list/watch of the
// Secret capi-inplace-system/plan-<node> (field selector metadata.name), get/list/
// watch/patch of Node <node> (its own annotations, agent-key among them), get of the control-plane mirror
// pods kube-system/<component>-<node> for the static-pod gate, list of pods with
// the field selector spec.nodeName=<node> for CEL gates (RBAC grants list of every
// pod: it cannot require the selector; docs/gates.md). The simulated host
// additionally patches nodes/status and creates/patches those mirror pods.
//
// Imports: internal/agent/{state,executor,journal,artifact,kube,gate}, internal/protocol,
// internal/backend{,/registry} (staging, stage.go), internal/atomicfile,
// api/v1alpha1, client-go and logr.
package agent
