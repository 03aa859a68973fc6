// Package executor is the node agent's imperative shell around the pure state
// machine (internal/agent/state): for each action it records the intent in the
// journal, performs the action through the OS backend, the Kubernetes layer
// (internal/agent/kube) or the health gates (internal/agent/gate), records the
// result, and feeds it back to the state machine.
//
// Invariants:
//   - the journal is saved before an action starts and after it ends, so a crash
//     at any point resumes exactly (finished actions are not re-done; the action
//     in flight is repeated, which is why every action is idempotent);
//   - nothing here needs the API server except the gates: status reports go to a
//     Reporter that must not block (the agent's reporter retries in the
//     background), so an update continues while the API server is unreachable;
//   - a cancelled context stops the executor without recording a failure: the
//     next Resume repeats the interrupted action.
//   - a rollback's reboot is issued only after the OS backend's status went to
//     the state machine (state.ImageObserved), which records it done without a
//     reboot when the node already runs, and boots next, the image it ran
//     before the plan (read from the backend when the plan starts).
//   - an action runs only with the rescue static pod in place when
//     state.RescueWanted says the node needs it (a control plane about to change,
//     or changing, what it boots into), and the pod is removed when the update
//     ends; RollBack is what that pod runs when the node's API server does not
//     come back.
//
// Imports: internal/agent/{state,journal,kube,gate}, internal/backend,
// internal/protocol, logr and the standard library.
package executor
