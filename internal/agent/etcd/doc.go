// Package etcd is the node agent's access to the node's local etcd member. It links
// none of etcd's Go libraries: the etcd client and etcdutl (with etcd's server
// packages) were half of the agent's binary and idle memory, so they live in the
// helper binary cmd/capi-inplace-etcd (package etcdhelper), which the agent's image
// carries beside the agent (a kubeadm host has no etcdctl or etcdutl: they live
// inside the etcd image):
//   - Local runs the helper for the member's status, health, the whole cluster's
//     quorum (QuorumReader), the snapshot (streamed into the caller's file) and the
//     offline restore, with kubeadm's healthcheck client certificate;
//   - ParseManifest reads the member's identity (name, peer URLs, initial cluster,
//     token, data directory) from kubeadm's etcd static pod manifest, so a restored
//     member keeps the name and peer URLs that a later `kubeadm join` expects;
//   - DataDirInUse tells whether an etcd process still holds a data directory
//     (etcd keeps an exclusive flock on its bbolt file while it runs);
//   - CheckQuorum decides on a QuorumView whether the cluster is whole.
//
// Member is the interface the agent's Kubernetes layer (internal/agent/kube)
// drives; the simulated host implements it with a fake member store.
// Subpackage etcdtest starts real etcd processes for tests and builds the helper.
//
// Imports: k8s.io/api (Pod), sigs.k8s.io/yaml, golang.org/x/sys/unix,
// internal/agent/helperbin (finding the helper) and the
// standard library (os/exec for the helper). Never go.etcd.io/etcd (test/productdeps
// fails the agent's build if it links it).
package etcd
