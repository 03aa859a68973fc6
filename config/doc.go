// Package config holds no code: it is the home of capi-inplace's deployment manifests
// (kustomize bases under manager/, rbac/, certmanager/, extensionconfig/, composed by
// default/) and of the test that keeps them valid.
//
// config_test.go renders config/default with kustomize's Go API, checks the objects
// against each other (Service names in the Certificate, the CA Secret in the
// ExtensionConfig, RBAC pinned to an allow-list), and applies every object with
// server-side dry run to a real kube-apiserver (envtest) that has Cluster API's and
// cert-manager's CRDs installed, then asks that API server's RBAC authorizer what the
// extension's ServiceAccount may and may not do.
package config
