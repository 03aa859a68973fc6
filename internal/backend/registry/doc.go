// Package registry builds the OS backends a node is configured with.
//
// Which backend updates a node is decided per cluster or node pool by the plan
// (NodePlan.OS.Backend, with the artifact's Ref and Digest). How that backend
// is set up on the node (its stateroot, slots, keys, tool paths) is node
// configuration: a JSON file at ConfigPath on the host, normally written by
// the node pool's bootstrap template (KubeadmConfigTemplate files), so that it
// follows the pool. Only the backends present in the file are built; a
// configured backend whose options are invalid is still registered, as one
// that fails every call with the configuration error, so that a plan naming
// it fails with that message rather than "unknown backend".
//
// Paths in the file are host paths. Backends run their commands on the host
// (through the agent's runner) and read the files they need under HostRoot.
//
// Allowed imports: the standard library, internal/backend and its backend
// packages.
package registry
