// Package kube is the node agent's Kubernetes layer: kubeadm upgrades, kubelet
// and kubeadm binaries, files written atomically with backups, kubelet flags and
// restart, and etcd snapshots with restore. Every command goes through
// backend.Runner (so the simulated host and recorded outputs can stand in for the
// real tools), etcd goes through etcd.Member (the etcd helper binary on a real node:
// a kubeadm host has no etcdctl or etcdutl), and every file path is a host path
// joined to a host root directory (so a plain directory can be the host).
//
// Every method is idempotent: the executor repeats an action whose result it did
// not journal before a crash. Per-update work (backups, the etcd snapshot and its
// restore markers) lives in a directory per attempt (AttemptsDir/<attempt ID>),
// so a retry of the same plan starts from fresh backups; backups are taken once
// per attempt (a second run finds the complete manifest and keeps the first,
// pre-change copy), and CollectAttempts removes finished attempts' directories.
//
// Imports: internal/backend, internal/protocol, internal/agent/etcd,
// internal/agent/service, internal/atomicfile, golang.org/x/sys/unix (every host
// path resolved inside the host root, hostfs.go),
// sigs.k8s.io/yaml (the kube-apiserver manifest's port and image, the kubelet's CRI
// socket: apiserver.go, images.go),
// internal/agent/artifact (the store the plan's kubeadm and kubelet are installed
// from, binaries.go) and the standard library.
package kube
