// Package helperbin finds the helper binaries the agent's image carries beside the
// agent (cmd/capi-inplace-etcd, cmd/capi-inplace-cel): libraries that only
// short-lived work needs (etcd's client and etcdutl, cel-go) run in those
// processes, so that the agent, idle on every node, neither links nor
// initialises them. Subpackage helperbintest builds them for tests.
//
// Imports: the standard library only.
package helperbin
