// Package status is the data behind `capi-inplace status`: the per-machine view of an
// in-place rollout, as seen from both sides (the management cluster's Machines and
// their conditions, the workload cluster's Nodes and the agent's annotations).
//
// It is split in three so that everything but the API calls is a pure function:
//
//	Gather (I/O)  -> Snapshot           gather.go: Clusters and Machines from the management
//	                                     cluster, Nodes from each workload cluster through
//	                                     Cluster API's kubeconfig Secret
//	Build (pure)  -> Report            view.go: one MachineView per Machine; time is an input
//	Render (pure) -> table or JSON      render.go: text table with progress bars, or the
//	                                     stable JSON schema documented on Report
//
// Invariants:
//   - An unreachable workload cluster never fails Gather: its Machines are still shown
//     from management-side data, and ClusterView.WorkloadError says why Nodes are missing.
//   - The JSON field names of Report are a public interface (scripts parse them): only
//     add fields, never rename or remove them.
//   - Report.Failed counts the machines whose node is in phase Failed or RolledBack for
//     the plan it is asked to run; the CLI turns it into a distinct exit code.
//
// Imports: api/v1alpha1, internal/protocol, internal/fleet, internal/fleet/machinestate (and internal/fleet/ownerread in gather.go), Cluster API's core v1beta2 types and
// util/conditions, k8s core types, sigs.k8s.io/yaml (-o yaml); client-go and controller-runtime only in gather.go.
package status
