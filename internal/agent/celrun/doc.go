// Package celrun evaluates the node agent's CEL gates in the CEL helper binary
// (cmd/capi-inplace-cel, package celgate/celhelper), which the agent's image
// carries beside the agent: one short-lived process per evaluation, so that the
// agent, idle on every node, does not link cel-go (its package initialisation
// alone costs some 3 MiB of RSS at every start, gate or no gate).
//
// The wire is celproto's: one Request as JSON on the helper's stdin, one Result
// as JSON on its stdout with the outcome's exit code. Eval maps the result back to
// the errors an in-process evaluation gave: nil, celproto.ErrFalse (errors.Is), or
// the helper's compile or evaluation error as a *celproto.Error.
//
// Imports: internal/celgate/celproto, internal/agent/helperbin and the standard
// library (os/exec for the helper). Never github.com/google/cel-go or
// internal/celgate (test/productdeps fails the agent's build if it links them).
package celrun
