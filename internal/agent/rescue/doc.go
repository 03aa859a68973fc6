// Package rescue is what the rescue static pod does on a control plane after a
// reboot that may have left the node unable to start its API server: a kubelet
// without an API server starts static pods only, so the agent (a DaemonSet pod)
// cannot come back to roll the node back.
//
// Decide is the pure part: from the journal's state and what the rescue saw of
// the node's own API server it says whether to leave (nothing for the rescue),
// probe the API server again, stand by (the API server is back: the agent
// carries on from its journal) or roll back. Rescuer runs it: it probes until
// its deadline and runs the rollback through the agent's executor, journaling
// every step, with no API client (status reports only go to the log; no
// rollback action needs the API server). The caller holds the journal's lock
// while Rescuer runs, and gives it up to the agent when Rescuer stands by.
//
// Imports: internal/agent/{executor,state}, internal/protocol, logr and the
// standard library.
package rescue
