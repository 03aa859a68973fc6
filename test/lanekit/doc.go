// Package lanekit holds what the lanes that drive real nodes share (test/e2enode,
// test/e2ereal): probes of availability, the figures table, the artifact server and
// the registry that stand for an operator's mirrors. It is test code: no product
// binary imports it (test/productdeps checks).
package lanekit
