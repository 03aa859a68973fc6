// Package metrics holds what every Prometheus metrics set of capi-inplace shares:
// Register, which registers a collector or reuses the one of the same description
// already on the registry (a second NewMetrics on the same registry, as when the
// binary wires one set into two components). The metric sets themselves live next
// to what they measure (internal/extension, internal/guard, internal/agent/agentmetrics).
//
// Imports: the Prometheus client only, so that the agent can link it.
package metrics
