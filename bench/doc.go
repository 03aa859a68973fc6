// Package bench is capi-inplace's performance suite: the measurements behind
// `make bench` (driver: bench/cmd/capi-inplace-bench) and the Go benchmarks of the
// hook handler path (go test -bench . -benchmem ./bench/).
//
// It measures side by side in one run, because the machines are shared and noisy:
// hook latency of `capi-inplace extension` against upstream's test extension over
// real HTTPS at a fixed open-loop rate and at saturation; the extension's memory
// and latency with many clusters and machines; the idle agent's footprint and its
// plan pick-up delay; the in-place rollout time on the local upstream stack
// with capi-inplace against a null extension (bench/nullext) that does no work; and
// `capi-inplace fleet status` over a seeded fleet of 1,000 clusters (fleet.go).
//
// Pieces: a load generator and percentile statistics (load.go, pure apart from the
// clock and the request function it is given), realistic hook payloads built from
// internal/planner/plannertest (payloads.go), process probes from /proc and
// Prometheus /metrics (proc.go), envtest with Cluster API's CRDs (env.go) and the
// result table (table.go).
//
// Imports: internal/extension (+extensiontest), internal/planner(+plannertest),
// internal/policy, internal/protocol, internal/workload, internal/coordinator/nodeplan (sealing a plan
// to the agent's key), internal/testenv (envtest), internal/localstack (process handling, the
// stack), api/v1alpha1, Cluster API types, controller-runtime, client-go, Prometheus's text
// parser (prometheus/common/expfmt). Never
// imported by the product.
//
// Invariants: every process the suite starts runs in its own process group with a
// parent-death signal (localstack.StartProcess) and is stopped by its id; open-loop
// latency is measured from each request's scheduled send time, so a stalled server
// shows as latency, not as a lower request rate (no coordinated omission).
package bench
