// Package e2e holds the end-to-end scenarios of capi-inplace: real upstream Cluster API
// v1.14.2 managers (internal/localstack) drive bin/capi-inplace extension over HTTPS,
// and one simulated agent process (bin/capi-inplace-dev agent --simulate) per Node of each
// in-memory workload cluster does the node side. The tests are behind the build tag
// e2e and run with `make e2e`; see README.md for what the in-memory workload API
// server supports.
//
// Each scenario works in a namespace of its own, served by an extension registered for
// that namespace's label, so scenarios run in parallel (t.Parallel, `-parallel` in
// E2E_FLAGS). Two run alone, before the rest: TestRestartSafety and
// TestTwoReplicasSurviveLeaderKill kill the shared extension process, which every
// parallel scenario needs.
package e2e
