// Package etcd is the node agent's access to the node's local etcd member, through
// etcd's own Go libraries so that nothing is needed on the host (a kubeadm host has
// no etcdctl or etcdutl: they live inside the etcd image):
//   - Local talks to the member with etcd's client (snapshot streamed over the
//     Maintenance API, health, member list, status) using kubeadm's healthcheck
//     client certificate, and restores a snapshot offline with etcdutl's snapshot
//     package;
//   - ParseManifest reads the member's identity (name, peer URLs, initial cluster,
//     token, data directory) from kubeadm's etcd static pod manifest, so a restored
//     member keeps the name and peer URLs that a later `kubeadm join` expects;
//   - DataDirInUse tells whether an etcd process still holds a data directory
//     (etcd keeps an exclusive flock on its bbolt file while it runs).
//
// Member is the interface the agent's Kubernetes layer (internal/agent/kube)
// drives; the simulated host implements it with a fake member store.
// Subpackage etcdtest starts real etcd processes for tests.
//
// Imports: go.etcd.io/etcd/{client/v3,client/pkg/v3,etcdutl/v3/snapshot},
// go.uber.org/zap (etcd's logger, discarded), k8s.io/api (Pod), sigs.k8s.io/yaml,
// golang.org/x/sys/unix and the standard library. etcdutl pulls in etcd's server
// packages; they are kept in this package alone so the agent can be slimmed later.
package etcd
