package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
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

// guardProfileEnv names a file that receives a CPU profile of this process during the
// guard section (the guard handler, its cache and the client run in process; the API
// server does not): `go tool pprof bin/capi-inplace-bench <file>`.
const guardProfileEnv = "CAPI_INPLACE_BENCH_GUARD_CPUPROFILE"

// guard: section 5, the in-place-only admission guard's latency.
func (r *runner) guard(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	if path := os.Getenv(guardProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("guard profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("guard profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	m, err := bench.MeasureGuard(ctx, r.env, guardRate, r.o.duration)
	if err != nil {
		return err
	}
	r.rows = append(r.rows, bench.GuardRows("5", guardRate, m, guardP99Target)...)
	return nil
}
