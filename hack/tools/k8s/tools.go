//go:build tools

// Package tools pins the binaries that tests run against: a real kube-apiserver,
// etcd and kubectl, built from their Go modules because no binary can be downloaded.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
