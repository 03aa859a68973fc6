package fleet

import (
	"fmt"
	"strings"
)

// SpecLookup returns the current spec key of an owner ("MachineDeployment/md-0");
// ok false when the owner no longer exists.
type SpecLookup func(owner string) (spec string, ok bool)

// Counted returns the failures of pool that still count against its budget:
// those without an owner (they count until resume), and those whose owner
// exists with the spec key it had when the failure was recorded. A changed spec
// or a deleted owner resets the budget. current is asked only about the owners
// of pool's failures (Owners).
func Counted(failures []Failure, pool string, current SpecLookup) []Failure {
	var out []Failure
	for _, f := range failures {
		if f.Pool != pool {
			continue
		}
		if f.Owner != "" {
			if spec, ok := current(f.Owner); !ok || spec != f.Spec {
				continue
			}
		}
		out = append(out, f)
	}
	return out
}

// Budget is the failure budget of one pool: how many failed nodes are allowed
// before new node updates halt. Zero or less: no budget (never halts).
type Budget int

// DefaultBudget halts after the first failure.
const DefaultBudget Budget = 1

// Halted reports whether counted failures exhaust the budget, with the message
// the hook answers ("halted: 1 of 1 failures allowed (node w1: GateFailed ...)").
func (b Budget) Halted(counted []Failure) (bool, string) {
	if b <= 0 || len(counted) < int(b) {
		return false, ""
	}
	parts := make([]string, 0, len(counted))
	for _, f := range counted {
		parts = append(parts, fmt.Sprintf("node %s: %s", f.Node, f.Cause))
	}
	return true, fmt.Sprintf("halted: %d of %d failures allowed (%s)", len(counted), int(b), strings.Join(parts, "; "))
}
