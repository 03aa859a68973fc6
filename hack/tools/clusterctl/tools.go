//go:build tools

// Package tools pins clusterctl at the Cluster API release our go.mod uses
// (sigs.k8s.io/cluster-api v1.14.2), built into bin/clusterctl by
// `hack/tools/build.sh clusterctl` for the clusterctl round trip test
// (test/clusterctl). A module of its own: clusterctl's dependencies (viper, go-github,
// envsubst, ...) stay out of our go.mod and out of the managers' pins in ../capi.
package tools

import _ "sigs.k8s.io/cluster-api/cmd/clusterctl"
