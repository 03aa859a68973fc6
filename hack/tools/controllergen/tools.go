//go:build tools

// Package tools pins controller-gen, which `make generate` runs to write the
// deep copies of api/v1alpha1's API types and their CustomResourceDefinitions in
// config/crd. It has a module of its own so that its dependencies never reach
// the product's go.mod.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
