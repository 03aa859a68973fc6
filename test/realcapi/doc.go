// Package realcapi is what the real Cluster API lane (test/e2ereal, `make e2e-real`)
// and the demo on real nodes (`make demo-real`) share: the lane's two releases, its
// ClusterClass and load-balancer template for the Dev provider's Docker backend, the
// mirrors that stand for an operator's (a registry and an artifact server on the kind
// network's gateway), and the extension's policy naming the target release's
// binaries by digest. It is test code: no product binary imports it
// (test/productdeps checks).
package realcapi
