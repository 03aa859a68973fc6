//go:build e2enode

// Package e2enode is the real-node lane: the node agent upgrades real kubeadm nodes in
// place (containerd, runc, the kubelet, kubeadm, etcd and the control-plane static
// pods, all real; hack/realnode runs each node in namespaces of its own on this
// machine), installed as a pod by the extension as in production, and driven through
// the extension's UpdateMachine hook over HTTPS exactly as Cluster API's machine
// controller drives it. Every assertion is made on the node or its API server.
//
// Run it with `make e2e-node` (root: namespaces, mounts, cgroups). Figures go to
// _artifacts/realnode/figures.md.
//
// Imports: the product's packages only as a client would (bench's hook client and
// management environment, protocol to read the node's status), client-go.
package e2enode
