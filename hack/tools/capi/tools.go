//go:build tools

// Package tools pins the upstream Cluster API v1.14.2 managers that the end-to-end
// stack runs as separate processes: core, KubeadmControlPlane, kubeadm bootstrap, the
// Docker/Dev infrastructure provider (in-memory backend) and upstream's test runtime
// extension (the baseline our extension is measured against).
package tools

import (
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/controlplane/kubeadm"
	_ "sigs.k8s.io/cluster-api/core"
	_ "sigs.k8s.io/cluster-api/test/extension"
	_ "sigs.k8s.io/cluster-api/test/infrastructure/docker"
)
