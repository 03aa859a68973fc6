// Package guard is the in-place-only admission guard: a validating webhook that
// refuses, at the write, any change that would make Cluster API replace a Machine of a
// Cluster in a namespace labelled inplace.capi-inplace.dev/enabled=true (the
// registration's namespaceSelector), with the planner's reason in the refusal.
//
// It decides with the code behind `capi-inplace plan`, so the two never disagree:
//
//	webhook.go (I/O)   decode the AdmissionReview's old and new object; find the
//	                   Cluster(s) the object belongs to (for a template: the Clusters
//	                   whose KubeadmControlPlane or MachineDeployments reference it);
//	                   preview.Gatherer reads the live Snapshot and Propose applies the
//	                   write to it (change.go turns the write into the merge patch
//	                   Apply expects)
//	decide.go (pure)   Decide: preview.Build of the Cluster as it is and with the write;
//	                   a reason to replace a Machine that only the write brings refuses
//	                   it, unless the write carries a new allow-replace value
//	metrics.go         refusals by cause kind (preview.CauseKind: a fixed set), writes
//	                   by kind and result, latency
//	                   A Cluster.spec.topology write brings the writes the topology
//	                   controller derives from it (preview's topology.go: Cluster API's
//	                   desired-state generator, read-only; a chained upgrade through
//	                   this extension's GenerateUpgradePlan hook by its first step, with
//	                   the hook's planner), planned with the write
//
// Covered writes: Cluster.spec.topology (version, variables, class, control plane,
// machine deployments: judged at the Cluster write from the derived desired state; when
// it cannot be computed, by the version alone with an admission warning, and the
// derived writes are judged when the topology controller makes them),
// KubeadmControlPlane, MachineDeployment,
// KubeadmConfigTemplate and infrastructure machine templates (changed under their name:
// planned as if rotated, like plan does), MachineSet deletion. Machine deletes are not
// guarded (docs/guard.md: most are Cluster API's own).
//
// Invariants:
//   - Fails closed for opted-in namespaces: a Cluster that cannot be read or planned
//     refuses the write (failurePolicy Fail covers an unreachable extension); other
//     namespaces are never sent to it.
//   - An update that changes no spec (status, metadata, finalizers) is allowed without
//     any read, so controllers' own writes cost nothing.
//   - A reason that exists without the write (a Machine marked for deletion, an
//     earlier change) does not refuse it.
//   - The override is one write: AllowReplaceAnnotation admits the write that sets or
//     changes its value, and is recorded in an Event on the object (not on dry runs).
//
// The Secrets a write's KubeadmConfigs reference are counted against the budget
// the CanUpdate hooks refuse by (internal/secretbudget, through Options.Secrets,
// the extension's bounded Secret cache): over it the write is refused as any
// other replacing write; a referenced Secret that does not exist yet is not over
// it, and the write is admitted with a warning.
//
// Imports: api/v1alpha1, internal/preview, internal/planner, internal/policy,
// internal/secretbudget, internal/extsettings, Cluster API API types, apimachinery,
// client-go events, controller-runtime's client and admission, prometheus,
// internal/metrics (Register).
package guard
