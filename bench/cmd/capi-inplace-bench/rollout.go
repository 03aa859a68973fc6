package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/bench"
)

// rollout: section 2, the in-place round on the local upstream stack with
// capi-inplace against the null extension (same CanUpdate answers, UpdateMachine
// done at once): the ratio is our orchestration overhead.
func (r *runner) rollout(ctx context.Context) error {
	if _, err := os.Stat(r.o.nullExt); err != nil {
		return fmt.Errorf("null extension binary (make bench builds it): %w", err)
	}
	if err := waitPortFree(ctx, inMemoryDebugPort, r.o.waitStack); err != nil {
		return err
	}
	t0 := time.Now()
	stack, err := bench.StartRolloutStack(ctx, r.bin, r.o.nullExt, r.logDir, r.o.extensionArgs...)
	if err != nil {
		return err
	}
	defer stack.Stop()
	logf("rollout: stack and extensions up in %s", time.Since(t0).Round(time.Second))

	type pair struct {
		what       string
		ours, null *bench.RolloutCluster
		// target is issue 15's bound on a/b for this shape.
		target float64
	}
	mk := func(ns, ext string, cp, w, maxUnavailable int) *bench.RolloutCluster {
		return &bench.RolloutCluster{Stack: stack, Namespace: ns, Extension: ext, Name: "c", ControlPlane: cp, Workers: w, MaxUnavailable: maxUnavailable}
	}
	pairs := []pair{{
		what: "ClusterClass 3 CP + 2 workers (MD maxUnavailable 1), files round", target: 1.10,
		ours: mk("roll-cc-ours", "capi-inplace", 3, 2, 1), null: mk("roll-cc-null", "null", 3, 2, 1),
	}}
	if w := r.o.rolloutWorkers; w > 0 {
		pairs = append(pairs, pair{
			what: fmt.Sprintf("ClusterClass 3 CP + %d workers (MD maxUnavailable 10), files round", w), target: 1.15,
			ours: mk("roll-md-ours", "capi-inplace", 3, w, 10), null: mk("roll-md-null", "null", 3, w, 10),
		})
	}
	// Provision everything at once: the clusters' creation is not measured.
	var all []*bench.RolloutCluster
	for _, p := range pairs {
		all = append(all, p.ours, p.null)
	}
	for _, c := range all {
		if err := c.Create(ctx); err != nil {
			return err
		}
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.WaitReady(ctx, 8*time.Minute, c.Extension == "capi-inplace")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logf("rollout: %d clusters ready after %s", len(all), time.Since(t0).Round(time.Second))
	for _, p := range pairs {
		var ours, null []time.Duration
		for round := range r.o.rolloutRounds {
			order := []*bench.RolloutCluster{p.null, p.ours}
			if round%2 == 1 {
				order = []*bench.RolloutCluster{p.ours, p.null}
			}
			for _, c := range order {
				cpuBefore := bench.SnapshotCPU()
				reqBefore, reqErr := bench.SnapshotAPIRequests(ctx, stack.Config)
				d, err := c.Round(ctx, 10*time.Minute)
				// Where the round's CPU went, by process: on 2 cores the 3 + 30 round
				// is CPU-bound, so what we add anywhere (agents, the workload API,
				// the harness's proxy) lengthens Cluster API's own steps.
				cpu := bench.FormatCPU(bench.SnapshotCPU().CPUSince(cpuBefore), 10)
				if err != nil {
					r.rows = append(r.rows, bench.Row{Section: "2", Measurement: p.what, Ours: "failed", Target: fmt.Sprintf("a/b ≤ %.2f", p.target), Verdict: "MISSED"})
					return err
				}
				logf("rollout: %s on %s: %s", p.what, c.Extension, d.Round(100*time.Millisecond))
				logf("rollout:   CPU during the round (all processes on the machine) %s", cpu)
				// And what the management API server was asked during it, by kind.
				if reqErr == nil {
					var reqAfter bench.APIRequests
					if reqAfter, reqErr = bench.SnapshotAPIRequests(ctx, stack.Config); reqErr == nil {
						logf("rollout:   management API requests during the round %s", reqAfter.Since(reqBefore, 60))
					}
				}
				if reqErr != nil {
					logf("rollout:   management API requests during the round: %v", reqErr)
				}
				if c == p.ours {
					ours = append(ours, d)
				} else {
					null = append(null, d)
				}
			}
		}
		// Cluster API's own cadence has hiccups (a KubeadmControlPlane that waits
		// ~17 s before the next machine in one round of a pair, 2 s in the other):
		// the verdict compares the fastest rounds, floor against floor.
		a, b := slices.Min(ours), slices.Min(null)
		r.rows = append(r.rows, bench.Row{Section: "2", Measurement: fmt.Sprintf("%s: wall time (a) capi-inplace vs (b) null extension, fastest of %d rounds (all rounds)", p.what, len(ours)),
			Ours: fmt.Sprintf("%s (%s)", round(a), rounds(ours)), Baseline: fmt.Sprintf("%s (%s)", round(b), rounds(null)),
			Ratio:  bench.Ratio(float64(a), float64(b)) + fmt.Sprintf(" (means: %s)", bench.Ratio(float64(mean(ours)), float64(mean(null)))),
			Target: fmt.Sprintf("a/b ≤ %.2f", p.target), Verdict: bench.Verdict(float64(a) <= p.target*float64(b))})
	}
	return nil
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// inMemoryDebugPort is the fixed port of the in-memory provider's workload cluster
// mux (upstream's DefaultDebugPort): one local stack per machine at a time.
const inMemoryDebugPort = 19000

// waitPortFree waits until nothing listens on port (another local stack, e.g. the
// end-to-end tests), polling every 5 s for at most timeout.
func waitPortFree(ctx context.Context, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	logged := false
	for {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err == nil {
			return l.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port %d still in use after %s (another local stack is running): %w", port, timeout, err)
		}
		if !logged {
			logf("rollout: port %d is in use (another local stack?): waiting up to %s", port, timeout)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

func round(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

func rounds(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = round(d)
	}
	return strings.Join(out, ", ")
}
