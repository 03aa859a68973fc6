// Package cli is the operator CLI, `status`, `plan` and `policy validate`, shared by
// both spellings: `capi-inplace status|plan|policy` (cmd/capi-inplace) and the kubectl
// plugin `kubectl inplace status|plan|policy` (cmd/kubectl-inplace, installed as
// kubectl-inplace on PATH). One implementation, so that the two never differ in flags, output or
// exit codes (docs/cli.md).
//
// The commands only wire flags to the pure packages: internal/status gathers and
// renders the rollout view, internal/preview the in-place-or-replace plan. The
// connection flags are kubectl's own (k8s.io/cli-runtime genericclioptions
// ConfigFlags: --kubeconfig, --context, -n/--namespace, --cluster, --user, --as, ...),
// so a plugin run inherits what kubectl users type.
//
// Invariants:
//   - Exit codes: 0 ok; 1 the command failed; 2 plan: at least one Machine would be
//     replaced; 3 status: at least one node's plan ended Failed or RolledBack; 4
//     policy validate: a policy is invalid. A command returns an error with an
//     ExitCode method for 2, 3 and 4; ExitCode maps every other error to 1.
//   - plan never writes to the management cluster (its client is a reader).
//   - No test harness is linked (test/productdeps checks both binaries).
//
// Imports: internal/status, internal/preview, internal/planner, internal/policy,
// internal/backend (+ registry, none, swupdate), cobra, k8s.io/cli-runtime
// genericclioptions, client-go, controller-runtime's client, Cluster API's types,
// sigs.k8s.io/yaml.
package cli
