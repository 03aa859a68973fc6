// Package secretbudget is the one rule for the Secrets a KubeadmConfig's files and
// users reference: which they are (Refs), what each costs (Bytes) and how much of
// them one update may read (MaxBytes). UpdateMachine reads them under it (Read),
// the CanUpdate hooks refuse a configuration over it, and the in-place-only guard
// and `capi-inplace plan` count them the same way (Sizes), so that no write the
// guard admits becomes a replacement because its Secrets are over the budget.
//
// The rule, in fold: the referenced names in sorted order, a Secret that does not
// exist skipped (it is not over the budget; whoever reads it later counts it
// then), each one's Bytes summed, and reading stops at the first Secret that
// crosses MaxBytes: one check holds at most the budget plus one Secret, whatever
// the namespace holds.
//
// Invariants:
//   - Every reader of the rule goes through fold: the coordinator, the hooks, the
//     guard and plan cannot disagree on where the budget is crossed.
//   - Sizes.Check is pure; Read and Sizes.Read do the reading, through a
//     client.Reader the caller chooses (the extension passes its bounded
//     SecretCache, never an informer of every Secret).
//
// Imports: k8s.io/api core, apimachinery (errors, unstructured, runtime), Cluster
// API bootstrap types, controller-runtime's client (Reader only).
package secretbudget
