//go:build e2ereal

// Package e2ereal is the real Cluster API lane: upstream Cluster API v1.14.2 (core,
// KubeadmControlPlane, kubeadm bootstrap, and the Docker backend of its Dev provider,
// as processes) creates real kubeadm nodes as containers of a Docker engine
// (hack/realcapi), and our extension, installed as in production, installs the node
// agent into each workload cluster and updates the nodes in place when Cluster API or
// the single-node path asks. Every assertion is made on the nodes, their API servers
// or the management cluster's objects; none on our own logs.
//
// Run it with `make e2e-real` (root): the test binary runs in the Docker engine's
// network namespace, where the node containers' addresses are reachable and the lane's
// registry and artifact server listen on the kind network's gateway (172.18.0.1).
// Figures go to _artifacts/realcapi/figures.md.
package e2ereal
