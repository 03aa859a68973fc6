// Package coordinator implements the UpdateMachine hook: it drives the in-place
// update of one Machine's node in a workload cluster, one bounded step per call.
//
// The hook request is a trigger, never a source of truth (trigger.go): the Machine it
// names, its KubeadmConfig and its infrastructure machine are read from the
// management API as stored, the cluster is the stored Machine's, and only Machines
// Cluster API marked for an in-place update (update-in-progress annotation and
// UpdateMachine pending) in namespaces labelled inplace.capi-inplace.dev/enabled=true
// are acted on; a request that disagrees with the stored objects gets a Failure and
// nothing is touched. UpdateNode is the in-process entry of the single-node
// controller, which passes a desired spec not stored yet.
//
// Each call loads a scope (the Machine from the management cluster for its nodeRef,
// its Cluster, the workload Node, the published plan), builds the node plan
// (internal/coordinator/nodeplan), observes the node's annotations and decides the
// next step with the pure Decide. The steps are: 1 ensure the agent (optional),
// 2 cordon, 3 drain (non-blocking, internal/coordinator/drain), 4 publish the plan
// (Secret capi-inplace-system/plan-<node>, then the node's desired-plan annotation),
// 5 wait for the agent's status for this plan hash, 6 verify from outside (kubelet
// version, Ready) and uncordon. Progress answers Success with retryAfterSeconds and a
// deterministic "step k/6: ..." message; done answers Success with 0; a rolled back
// update, or one that failed before changing the node, is uncordoned, recorded on the
// Machine (InPlaceUpdate condition, Event) and answered with Failure and its cause on
// every later call. A new desired spec (a new plan hash)
// starts a new update; to retry the same plan, an operator annotates the Machine
// with inplace.capi-inplace.dev/retry (fleet.go).
//
// Fleet controls (fleet.go, pure core internal/fleet) run after Decide and before
// cordon: retry and cancel requests on the Machine, resume on the Cluster, and for
// an update not yet started the failure budget, maintenance windows and soak; a
// held update answers in progress and touches nothing, except that one a closed
// maintenance window holds has its plan staged meanwhile (stageahead.go: fetched
// and verified beside what the node runs, no cordon), within the pool's download
// windows. Their record (failures, last finished node, measured durations) is the
// Cluster's fleet-state annotation. After them, a worker's update that raises its
// kubelet's version waits the same way (staged meanwhile) until the cluster's
// control plane is at that version (controlplanegate.go, pure ControlPlaneGate):
// a kubelet must never be newer than an API server it may reach.
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
//   - A broken node (the agent reports RollbackFailed or JournalCorrupt) is never
//     uncordoned: it stays cordoned, the Machine's InPlaceUpdate condition says
//     InPlaceUpdateDegraded, and every call answers Failure.
//   - Every phase of an update has a deadline (Options.Deadlines, the policy's
//     deadlines; watchdog.go), timed on the coordinator's own clock from the
//     Machine's UpdatePhaseAnnotation, never from a time the node writes. Past it
//     the update fails (counted against the failure budget): before cordon the node
//     is untouched; a published plan the agent reported nothing for (pick-up, 5 min
//     by default) is withdrawn, the node uncordoned and the plan marked
//     (PlanNotPickedUpAnnotation); after that the node stays cordoned, said on the
//     Node and the Machine, and the remediation hold follows one rule
//     (releaseBrokenNode). Staging and pick-up do not count the time the workload
//     API is unreachable; later phases do, and are judged without it. The record
//     (protocol.PhaseRecord) is also what the management cluster knows of an
//     update staged ahead of a closed window: phase Staged, without a deadline,
//     which the views read (internal/fleet/machinestate).
//   - Answers are typed (Outcome: in progress, done, failed-final, failed-retryable
//     with a Cause); messages are for humans only.
//   - Fleet holds (paused, halted, window closed, soaking, waiting for the control
//     plane) happen only before cordon; an update past cordon always runs to a
//     safe point.
//
// Steady-state calls (the agent works, the node settles) answer from informer caches
// when Options.Caches is set (caches.go): management objects from the manager's
// cache, Secrets metadata-only with bodies by resourceVersion (secretcache.go),
// workload Nodes and plan Secrets from bounded per-cluster watches
// (workloadcache.go), and a lingering call waits on a Node watch event. Only quiet
// "in progress" answers come from caches; every other answer and every write is
// decided on live reads, so a stale cache can delay an answer, never change it.
//
// Imports: api/v1alpha1, internal/protocol, internal/fleet (+ownerread), internal/policy, its own subpackages, Cluster API types,
// controller-runtime's client and cache, client-go, prometheus and internal/metrics (updatemetrics.go). Not internal/extension (which calls us).
package coordinator
