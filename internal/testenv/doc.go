// Package testenv is the one entry point for tests that need a real kube-apiserver
// and etcd (controller-runtime's envtest): the rule for envtest's binaries
// (KUBEBUILDER_ASSETS unset: skip locally, fail when CI is set), starting and
// stopping an API server with Cluster API's CRD sets from the module cache, extra
// CRDs, a stand-in infrastructure machine CRD and webhooks, a TestMain helper
// and Require(t).
//
// Invariants: test support only; no product package imports it (depguard's
// product-no-harness rule and test/productdeps enforce that). The caller
// owns what runs on the API server: Start installs CRDs and webhook
// configurations and nothing else.
//
// Imports: controller-runtime's envtest, client-go's rest, apiextensions types,
// apimachinery, sigs.k8s.io/yaml, the standard library; test support only.
package testenv
