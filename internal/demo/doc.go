// Package demo is `capi-inplace-dev demo`: the whole in-place upgrade on this machine, visible.
//
// It starts the local upstream Cluster API stack (internal/localstack), registers our
// extension and its single-node control-plane hold webhook, creates a ClusterClass
// cluster of one control-plane node (opted into the single-node path) and two workers
// on Nodes (the in-memory provider with a simulated agent per node, or real kubeadm
// nodes: test/realcapi), then changes spec.topology.version one minor up and the
// files variable in one update. While the rollout runs it re-renders
// internal/status's per-machine table; at the end it prints a summary of checks
// (same Machines, none created, every node at the new kubelet, the new file on every
// host) and fails when any check fails.
//
// Split:
//
//	run.go      (I/O)  Options, the phases in order, the fail-fast port check, teardown
//	nodes.go    (I/O)  Nodes, what the cluster runs on; Simulated, the default
//	cluster.go  (I/O)  hold webhook, the Cluster, waiting for its machines
//	rollout.go  (I/O)  the update, the Machine watch, the live loop, collecting the outcome
//	live.go     (pure) what to print each tick: an in-place redraw for a terminal, or
//	                   the changed rows as log lines otherwise; Timeline (per-node times)
//	summary.go  (pure) Outcome -> checks -> summary text
//
// Allowed imports: internal/localstack, internal/status, internal/singlenode (webhook
// definition only), api/v1alpha1, Cluster API types, controller-runtime's client.
//
// Invariants:
//   - Every process and temporary directory the demo starts is removed when Run returns,
//     also on an error or when ctx is cancelled (SIGINT/SIGTERM), unless Keep is set, in
//     which case they live until ctx is cancelled.
//   - Only one in-memory provider can run per machine (fixed port 19000): Run fails
//     fast, before starting anything, when the port is taken (unless PortWait is set).
package demo
