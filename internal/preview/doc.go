// Package preview is the data behind `capi-inplace plan`: for every Machine of a
// Cluster, what a change of its owner's desired state would do to it — updated in
// place, replaced, or left alone — and why, whether its node is drained and rebooted,
// and which OS backend would run. Nothing is written: the proposed change is applied
// in memory.
//
// It is split like internal/status so that everything but the API reads is pure:
//
//	Gather (I/O)   -> Snapshot (live)    gather.go: Cluster, KubeadmControlPlane,
//	                                     MachineDeployments, MachineSets, Machines and the
//	                                     bootstrap / infrastructure objects and templates
//	                                     they reference, through a client.Reader only
//	Apply (pure)   -> Snapshot (proposed) change.go: a proposed change (YAML objects)
//	                                     merged over the live objects; Gatherer.ProposeChange
//	                                     adds, for a Cluster.spec.topology change, the writes
//	                                     the topology controller derives (topology.go: Cluster
//	                                     API's desired-state generator over a read-only
//	                                     client; a class naming capi-inplace's
//	                                     GenerateUpgradePlan hook is planned with the hook's
//	                                     planner.UpgradePlan, by the first step)
//	Build (pure)   -> Report              build.go: per Machine, the same comparison Cluster
//	                                     API makes (KCP: CanUpdateMachine on the Machine,
//	                                     its KubeadmConfig and InfraMachine against KCP's
//	                                     desired ones; MachineDeployment: CanUpdateMachineSet
//	                                     on the Machine's MachineSet and its templates
//	                                     against the MachineDeployment's), decided by the
//	                                     real internal/planner, then the rollout settings
//	                                     that make Cluster API surge a new machine anyway,
//	                                     and a control-plane Machine with an unhealthy
//	                                     component (KCP's own filter: KCP scales it down);
//	                                     each reason carries a Cause kind, which the
//	                                     admission guard (internal/guard) counts
//	Render (pure)  -> table or JSON       render.go
//
// How close to Cluster API it is: the desired KubeadmConfig of a control-plane Machine
// is computed by KCP's own exported functions (desiredstate.ComputeDesiredKubeadmConfig
// and PrepareKubeadmConfigsForDiff), so version-derived kubeadm settings appear exactly
// as KCP will compute them. Where Cluster API normalizes with a server-side-apply dry
// run (a write, which plan never issues), the desired InfraMachine is approximated by
// merging the new template over the current object and dropping what the old template
// set and the new one does not.
//
// Invariants:
//   - No writes: Gather takes a client.Reader; the CLI test also wraps the client with an
//     interceptor that fails every write and checks that no object's resourceVersion moved.
//   - The JSON field names of Report are a public interface (CI pipelines parse them):
//     only add fields, never rename or remove them.
//   - Report.Summary.Replace counts the machines Cluster API would delete and recreate;
//     the CLI turns a non-zero count into its own exit code.
//
// The Secrets the desired KubeadmConfigs reference are counted by
// internal/secretbudget, the rule the CanUpdate hooks refuse by: gather.go reads
// their sizes into the Snapshot (Gatherer.Secrets) and Build turns a configuration
// over the budget into a replacement (CauseSecretBudget), as Cluster API would.
//
// Imports: api/v1alpha1, internal/planner, internal/policy, internal/secretbudget,
// internal/backend (for Capabilities only), Cluster API API types, KCP's public desired-state package and
// the topology desired-state generator (exp/topology desiredstate and scope, in
// topology.go), apimachinery, k8s.io/api core (namespaces); controller-runtime's client
// only in gather.go and topology.go.
package preview
