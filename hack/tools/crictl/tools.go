//go:build tools

// Package tools pins crictl, which Cluster API's Docker provider runs on every node
// it creates (hack/realcapi's node image). It has a module of its own so that
// cri-tools' dependencies never reach the product's go.mod.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
