package agent

import "context"

// ClaimPlan exposes claimPlan to the integration tests (package agent_test), which
// own the real API server.
func ClaimPlan(ctx context.Context, a *Agent, hash string) (bool, error) {
	return a.claimPlan(ctx, hash)
}
