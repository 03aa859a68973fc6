// Package agentmetrics is the node agent's Prometheus metrics, served on the
// agent's own port (--metrics-addr): how long each phase of a plan took on this
// node, which phase failed, the journal's writes, and when the last plan was
// committed. It observes the agent from its edges (the executor's Reporter and
// Journal, wrapped), so the agent's core does not know it is measured.
//
// Label values come from fixed sets (the protocol's phases, ok/error); nothing
// names a plan, a pod or a file. Counters start at zero with every agent
// process; phase durations are measured in this process, so a phase the process
// did not see begin (the reboot of a real node, which restarts the agent) is not
// timed.
//
// Imports: internal/agent/journal, internal/protocol, internal/metrics and the
// Prometheus client only (the agent stays free of controller-runtime).
package agentmetrics
