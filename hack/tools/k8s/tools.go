//go:build tools

// Package tools pins the binaries that tests run against: a real kube-apiserver,
// etcd and kubectl, and the node binaries of the release the real-node lane
// (hack/realnode) upgrades to, built from their Go modules because no binary can
// be downloaded.
package tools

import (
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
