// Package state is the node agent's functional core: a pure transition function
// from (State, Event) to (State, Output), in the spirit of etcd raft's Ready.
//
// The caller (internal/agent/executor) owns all I/O and must, in this order:
//
//  1. persist the State returned by Step (the journal) before performing
//     Output.Next, so that a crash at any point resumes exactly;
//  2. perform Output.Next (at most one action at a time: actions are ordered);
//  3. feed the outcome back as ActionSucceeded, ActionFailed or, for a reboot,
//     RebootIssued followed by Resumed with the new boot ID; before a rollback's
//     reboot, feed ImageObserved with the OS backend's status and issue the
//     reboot only if it is still the next action (it is skipped when the image
//     it would boot already runs);
//  4. after a process restart, feed Resumed: the machine answers with the first
//     action that is not done, so finished actions are never re-done and
//     unfinished ones never skipped.
//
// The action list is derived once, from the plan and the backend's capabilities
// (see Derive), when the plan is observed; rollback actions are derived once, in
// reverse order of what was started, when the first failure happens.
//
// Imports: standard library, internal/protocol and internal/backend (for
// Capabilities only). No context, clock or I/O: time and boot IDs are inputs.
package state
