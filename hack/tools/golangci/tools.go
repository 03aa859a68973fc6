//go:build tools

// Package tools pins golangci-lint, which `make lint` runs with the repository's
// .golangci.yml. It has a module of its own so that the linters' dependencies
// never reach the product's go.mod.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
