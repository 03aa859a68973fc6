// Package clusterctl holds the clusterctl round trip of capi-inplace's release
// artifacts (hack/release): a real clusterctl (bin/clusterctl, built from
// sigs.k8s.io/cluster-api/cmd/clusterctl at go.mod's version by
// `hack/tools/build.sh clusterctl`) installs, upgrades and deletes capi-inplace as a
// RuntimeExtensionProvider from a local file repository against a real kube-apiserver
// (envtest), after installing from the same repository Cluster API's core, kubeadm
// bootstrap and kubeadm control-plane providers (rendered from the Cluster API module's
// config/ with kustomize's Go API) and cert-manager (its CRDs from its Go module).
//
// No pod runs (envtest has no kubelet nor controller manager): the test asserts the
// objects clusterctl creates, changes and deletes, not running controllers. What that
// leaves out is in docs/install.md ("What the clusterctl test covers").
//
// It runs in `make test` (it needs no Cluster API stack, only envtest and clusterctl).
package clusterctl
