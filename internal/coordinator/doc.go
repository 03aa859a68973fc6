// Package coordinator implements the UpdateMachine hook: it drives the in-place
// update of one Machine's node in a workload cluster, one bounded step per call.
//
// Each call loads a scope (the Machine from the management cluster for its nodeRef,
// its Cluster, the workload Node, the published plan), builds the node plan
// (internal/coordinator/nodeplan), observes the node's annotations and decides the
// next step with the pure Decide. The steps are: 1 ensure the agent (optional),
// 2 cordon, 3 drain (non-blocking, internal/coordinator/drain), 4 publish the plan
// (Secret capi-inplace-system/plan-<node>, then the node's desired-plan annotation),
// 5 wait for the agent's status for this plan hash, 6 verify from outside (kubelet
// version, Ready) and uncordon. Progress answers Success with retryAfterSeconds and a
// deterministic "step k/6: ..." message; done answers Success with 0; a rolled back or
// failed update is uncordoned, recorded as an Event on the Machine, and answered with
// Failure and its cause on every later call. A new desired spec (a new plan hash)
// starts a new update; to retry the same plan, an operator removes the node's
// desired-plan and status annotations.
//
// Invariants:
//   - No state lives only in memory: the plan hash is a pure function of the desired
//     objects (pinned to the published plan, see nodeplan.Pin), and progress is read
//     from the node's annotations every call, so a restarted coordinator continues.
//   - The same desired state writes nothing twice: publish compares before writing.
//   - The coordinator uncordons only nodes it cordoned (CordonedByAnnotation), and
//     only after the agent committed (and the outside gates passed) or gave up.
//   - A call never blocks on the workload cluster beyond CallTimeout; an unreachable
//     workload API server is "in progress", never success.
//
// Imports: api/v1alpha1, internal/protocol, its own subpackages, Cluster API types,
// controller-runtime's client, client-go. Not internal/extension (which calls us).
package coordinator
