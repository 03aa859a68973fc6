package main

import (
	"context"
	"time"

	"github.com/capi-inplace/capi-inplace/bench"
)

// guardP99Target is issue 17's budget for the in-place-only guard on a
// KubeadmControlPlane update.
const guardP99Target = 20 * time.Millisecond

// guardRate is the open-loop rate of the guard run: far above how often an operator or
// the topology controller writes a KubeadmControlPlane (a few times per rollout), and
// low enough that the 2 shared cores measure the guard's latency, not a queue.
const guardRate = 10

// guard: section 5, the in-place-only admission guard's latency.
func (r *runner) guard(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	m, err := bench.MeasureGuard(ctx, r.env, guardRate, r.o.duration)
	if err != nil {
		return err
	}
	r.rows = append(r.rows, bench.GuardRows("5", guardRate, m, guardP99Target)...)
	return nil
}
