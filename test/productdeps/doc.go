// Package productdeps holds the test that keeps the test harness out of the
// product binaries: capi-inplace (extension and CLI) and capi-inplace-agent (the
// node agent) must not link the simulated host or OS backend, the local Cluster API
// stack, the demo, the bench, envtest or the repository's test helpers. The harness
// binary (test/cmd/capi-inplace-dev) links them instead. The kubectl plugin
// (cmd/kubectl-inplace) is a product too, and links only the CLI.
//
// Why a dependency test rather than a separate test module or build tags: the
// harness packages import internal packages of the product (the agent, the
// coordinator's helpers), which a separate module could only do through a replace
// directive and a second go.mod to keep in step; build tags would make a package's
// contents depend on how it is built, so `go build ./...` and `go vet ./...` would
// no longer see one tree. The rule that matters is the product binaries' import
// graph, and `go list -deps` states exactly that.
package productdeps
