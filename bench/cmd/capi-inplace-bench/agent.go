package main

import (
	"context"
	"fmt"
	"time"

	"github.com/capi-inplace/capi-inplace/bench"
)

// agent: section 3, the idle agent's footprint and its plan pick-up delay.
func (r *runner) agent(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	res, err := bench.MeasureAgent(ctx, r.env, r.bin, r.tmp, r.logDir, r.o.agentIdle, r.o.publications, r.o.publishPause)
	if err != nil {
		return err
	}
	cpuPct := 100 * res.IdleCPU.Seconds() / res.IdleWindow.Seconds()
	pick := bench.Result{Latencies: res.PickUp}
	apply := bench.Result{Latencies: res.Apply}
	r.rows = append(r.rows,
		// The harness's agent (simulated host, demo and local stack linked in); the
		// product agent's footprint and target are the footprint rows.
		bench.Row{Section: "3", Measurement: "idle simulated agent (`capi-inplace-dev agent --simulate`, test harness binary, envtest) RSS",
			Ours: fmt.Sprintf("%s (anon %s, file-backed %s)", bench.MiB(res.Idle.RSS), bench.MiB(res.Idle.Anon), bench.MiB(res.Idle.File))},
		bench.Row{Section: "3", Measurement: fmt.Sprintf("idle agent CPU (utime+stime over %s)", res.IdleWindow.Round(time.Second)),
			Ours: fmt.Sprintf("%s (%.2f%% of one core)", res.IdleCPU, cpuPct)},
		bench.Row{Section: "3", Measurement: fmt.Sprintf("plan pick-up: desired-plan write → first status of the plan (watch; the agent holds a plan's first status up to 250 ms for a newer one), p50 / p99 / max (n=%d, %s apart)", len(res.PickUp), r.o.publishPause),
			Ours:   fmt.Sprintf("%s / %s / %s", ms(pick.Percentile(0.5)), ms(pick.Percentile(0.99)), ms(pick.Percentile(1))),
			Target: "< 1 s", Verdict: bench.Verdict(len(res.PickUp) > 0 && pick.Percentile(1) < time.Second)},
		bench.Row{Section: "3", Measurement: "files-only plan: desired-plan write → Committed, p50 / max; agent RSS after (peak)",
			Ours: fmt.Sprintf("%s / %s; %s (%s)", ms(apply.Percentile(0.5)), ms(apply.Percentile(1)), bench.MiB(res.After.RSS), bench.MiB(res.After.HWM))},
	)
	return r.footprint(ctx)
}
