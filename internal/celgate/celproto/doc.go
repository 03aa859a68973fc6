// Package celproto is the wire between the node agent and its CEL helper binary
// (cmd/capi-inplace-cel, package celhelper): the request the agent writes to the
// helper's stdin, the result the helper answers on stdout with its exit code,
// and the errors the agent returns for each result. It links no cel-go, so the
// agent can speak to the helper (and callers can test errors.Is(err, ErrFalse))
// without initialising CEL's environment at every start.
//
// Imports: the standard library only. No I/O.
package celproto
