// Package etcdhelper is the only code that links etcd's Go libraries: Direct talks
// to the node's local etcd member with etcd's client (status, health, the snapshot
// stream of the Maintenance API, the whole cluster's quorum) using kubeadm's
// healthcheck client certificate, and restores a snapshot offline with etcdutl's
// snapshot package. Main is the command line of the helper binary
// cmd/capi-inplace-etcd, shipped in the agent's image beside the agent, which runs
// it through etcd.Local: the etcd client and etcdutl (with etcd's server packages)
// weigh about half of an agent that links them, so they stay out of the process
// that runs idle on every node (issue 15: agent binary < 40 MB, idle RSS < 30 MiB),
// and run only for the few seconds of a control-plane node's snapshot, health
// check or restore.
//
// The wire between the two processes: flags in etcdctl's spelling, JSON of the
// etcd package's types (Status, QuorumView) or the snapshot's bytes on stdout, a
// one-line error on stderr and exit code 1 on failure (2 for a usage error).
//
// Imports: internal/agent/etcd (the types), go.etcd.io/etcd/{api/v3,client/pkg/v3,
// client/v3,etcdutl/v3/snapshot}, go.uber.org/zap (etcd's logger, discarded) and the
// standard library.
package etcdhelper
