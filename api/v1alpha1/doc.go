// Package v1alpha1 holds capi-inplace's public vocabulary: the annotation and label
// keys, condition types and reasons, and settings keys through which the extension,
// the node agent and operators talk to each other.
//
// It imports only the standard library so that every other package, tests and
// third-party tooling can depend on it without pulling anything in.
package v1alpha1
