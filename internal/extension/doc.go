// Package extension serves capi-inplace's Cluster API runtime hooks over HTTPS:
// CanUpdateMachine, CanUpdateMachineSet (answered by the pure planner),
// UpdateMachine (delegated to a MachineUpdater, the coordinator) and
// GenerateUpgradePlan (chained upgrades: the planner's plan over the Cluster,
// ClusterClass and namespace an UpgradePlanReader reads as stored; workers of an
// opted-in cluster step at every minor, docs/chained-upgrades.md).
//
// Handlers are thin: decode the request's objects, call a pure compute function,
// fill the response, log and count. They never panic (a recovered panic becomes a
// Failure response), and a malformed request or an object of the wrong kind for
// its slot gets status Failure with a message that names what was wrong. An
// object of a kind we do not know how to update (an unknown infrastructure or
// bootstrap kind) is not malformed: the planner refuses its changes with a reason,
// CAPI then replaces the machine as it would without us.
//
// UpdateMachine never reports Success for work not done: without a coordinator it
// answers Failure, which CAPI retries. Every handler is registered with
// failurePolicy Fail: with Ignore, CAPI would treat an unreachable extension as a
// completed UpdateMachine.
//
// Both HTTPS ports (the hooks, and the admission webhooks' own port) serve through
// boundedServer: per port its own request budgets, header and body deadlines, and
// bounds per client (remote address) on connections and on bodies being received,
// so that no client can delay another's calls (limits.go).
//
// The CanUpdate hooks also read the Secrets the desired bootstrap configuration
// references (Options.Secrets, the coordinator's bounded SecretCache) and fail the
// call when they are over UpdateMachine's budget (internal/secretbudget, the rule
// the guard counts by): Cluster API never commits to an update UpdateMachine must
// fail, and never replaces the Machines, as it would on "cannot update in place".
//
// Imports: cluster-api hook, catalog and core types, the runtime server
// (sigs.k8s.io/cluster-api/exp/runtime/server), controller-runtime logging,
// webhook server, certwatcher and client (UpgradePlanReader), k8s.io/api core (namespaces), golang.org/x/sync/semaphore (the in-flight request budget),
// internal/connlimit (connections per client),
// prometheus, internal/metrics (Register), internal/planner, internal/policy,
// internal/secretbudget, internal/coordinator (its Outcome
// type: UpdateMachine writes the coordinator's typed answer).
package extension
