// Package celgate is the one definition of a CEL health gate
// (protocol.CELGate): the environment its expression is compiled in (the
// variables `node`, the agent's own Node as its JSON object, and `pods`, the
// pods bound to that node as JSON objects; Kubernetes' CEL string, list and
// regex extensions are not included, the standard library is), the rule that it
// is of type bool, and its evaluation under a cost limit. The policy compiles
// every expression at load, so a bad one is refused before any plan is written;
// the agent has it compiled again from the plan and evaluated by its CEL helper
// binary (cmd/capi-inplace-cel, package celhelper), so that the agent itself does
// not link cel-go (whose package initialisation alone costs some 3 MiB of RSS).
// Subpackage celproto is the wire between the two, and holds ErrFalse.
//
// Imports: standard library, github.com/google/cel-go and celproto only. No I/O.
package celgate
