package gate

import "context"

type gateKey struct{}

// WithGate names the gate that calls with the returned context belong to; the
// Checker sets it on every poll of a gate.
func WithGate(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, gateKey{}, name)
}

// GateFrom returns the name of the gate on whose behalf a Checker dependency
// (NodeReader, EtcdChecker, the command Runner) is called with ctx. It lets a
// wrapper of those dependencies (the simulated host's fail-gate) tell gates apart
// without hooks in the Checker.
func GateFrom(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(gateKey{}).(string)
	return name, ok
}
