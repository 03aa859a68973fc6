// Package agentcmd is the node agent's process: its command-line flags and the
// wiring of the agent from them (workload cluster client, host runner, service
// manager, journal, node key, OS backends, executor, gates, health endpoint).
//
// Two binaries run an agent through it: cmd/capi-inplace-agent on real nodes (the
// DaemonSet's image), and the test harness binary test/cmd/capi-inplace-dev, which
// passes a Simulator that replaces the host's edges (commands, reboots, kubeadm and
// kubelet binaries, etcd, the OS backend) with a simulated host for `agent
// --simulate`. This package knows only the Simulation type, so product binaries link
// no simulator; test/productdeps fails the build of a product binary that does.
//
// Imports: internal/agent and its subpackages (agentmetrics, etcd, executor, gate, journal, kube,
// service), internal/backend/{none,registry}, internal/protocol, internal/connlimit (the
// health and metrics endpoints' connection bounds), client-go, cobra,
// klog's textlogger and logr.
package agentcmd
