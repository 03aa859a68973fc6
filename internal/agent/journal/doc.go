// Package journal is the node agent's crash-safe record of what it is doing: the
// plan, the state machine's state, the action whose intent was recorded and not
// yet finished, and how many times each action was started.
//
// The executor saves an Entry before each action starts (intent) and after it
// finishes (result). File saves are atomic and durable: the entry is written to a
// temporary file in the same directory, fsynced, renamed over the journal and the
// directory is fsynced, so after a crash or power loss the journal holds either the
// previous or the new entry, never a mix.
//
// Lock is the node's claim on the journal: one process at a time acts on the host
// from it (the agent, or the rescue pod rolling a control plane back after a
// reboot that left no API server, so no agent).
//
// Imports: standard library only.
package journal
