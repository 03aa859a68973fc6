// Package fleetrollout is the FleetRollout controller: the shell around the pure
// core internal/fleet/rollout. On every pass it lists the Clusters the rollout's
// selectors choose, observes each from the management cluster alone (observe.go:
// the version the Cluster asks for against its Machines, each judged by
// internal/fleet/machinestate, the rule `fleet status` counts by), calls the core, writes the target to
// the Clusters it says to start (write.go: one write per Cluster, the Cluster's
// spec.topology.version or its KubeadmControlPlane's spec.version; a plain
// Cluster's MachineDeployments follow once its control plane reached the target),
// and writes the status. It requeues on a timer. Once the status is written it
// records an Event on the FleetRollout for each transition between the status it
// read and the one it wrote (events.go: a batch started, a halt began or lifted,
// completion, abort, Clusters failed or skipped) and sets the rollout's gauges
// (metrics.go).
//
// Invariants:
//   - Every write goes through the API server's admission, so the in-place guard
//     judges it as it judges a person's write. A write an admission webhook refuses
//     is never retried: the core skips the Cluster (WouldReplace, the webhook's message).
//   - Only Clusters the guard covers are written (namespace labelled
//     inplace.capi-inplace.dev/enabled=true, guard not disabled on the Cluster).
//   - Writes carry the object's resourceVersion: a Cluster changed since it was
//     read is not overwritten, and is tried again on the next pass.
//   - It runs only on the elected leader (controller-runtime's default).
//   - Events and metrics follow the status written, never the pass: a pass that
//     changes nothing records no Event, and a deleted rollout leaves no series.
//
// Imports: api/v1alpha1, internal/fleet/rollout, internal/fleet/machinestate, Cluster API's core and
// KubeadmControlPlane types, apimachinery, controller-runtime, the Prometheus client
// and internal/metrics.
package fleetrollout
