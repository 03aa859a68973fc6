//go:build tools

// Package tools pins the previous Kubernetes release that the real-node lane
// (hack/realnode) installs first and upgrades from: kubeadm, the kubelet and the
// control-plane components, built from their Go modules because no binary can be
// downloaded.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
