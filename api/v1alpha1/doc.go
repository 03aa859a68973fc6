// Package v1alpha1 holds capi-inplace's public vocabulary: the annotation and label
// keys, condition types and reasons, and settings keys through which the extension,
// the node agent and operators talk to each other; and the API types the management
// cluster serves as CustomResourceDefinitions (FleetRollout), whose deep copies and
// CRDs `make generate` writes (zz_generated.deepcopy.go, config/crd).
//
// It imports only the standard library and apimachinery's meta, runtime and intstr
// types, so that every other package, tests and third-party tooling can depend on it
// without pulling in a client.
//
// +kubebuilder:object:generate=true
// +groupName=inplace.capi-inplace.dev
package v1alpha1
