// Package archtest holds repository-wide tests of rules no single package can check
// for itself, such as "components talk in types, never in message text" (STYLE.md).
// It has no code of its own.
//
// Imports: the standard library (go/parser, go/ast) in its tests.
package archtest
