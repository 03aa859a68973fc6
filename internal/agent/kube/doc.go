// Package kube is the node agent's Kubernetes layer: kubeadm upgrades, kubelet
// and kubeadm binaries, files written atomically with backups, kubelet flags and
// restart, and etcd snapshots with restore. Every command goes through
// backend.Runner (so the simulated host and recorded outputs can stand in for the
// real tools) and every file path is a host path joined to a host root directory
// (so a plain directory can be the host).
//
// Every method is idempotent: the executor repeats an action whose result it did
// not journal before a crash. Backups are taken once per plan (a second run finds
// the complete manifest and keeps the first, pre-change copy).
//
// Imports: internal/backend, internal/protocol, internal/agent/journal (atomic
// writes) and the standard library.
package kube
