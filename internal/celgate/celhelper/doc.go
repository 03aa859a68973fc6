// Package celhelper is the CEL helper binary's code (cmd/capi-inplace-cel): it
// reads one celproto.Request on stdin, compiles its expression in the gate
// environment and evaluates it over the request's Node and pods with
// internal/celgate, and answers one celproto.Result on stdout with the outcome's
// exit code. The node agent runs it for every poll of a CEL gate
// (internal/agent/celrun), so that only this short-lived process links cel-go:
// cel-go's package initialisation (its standard library and ANTLR's parser
// tables) costs the process some 3 MiB of RSS from its start, whether a gate is
// configured or not.
//
// Imports: internal/celgate, internal/celgate/celproto and the standard library.
package celhelper
