package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/bench"
)

// fleetStatusTarget is issue 33's budget for `fleet status` over 1,000 clusters.
const fleetStatusTarget = 5 * time.Second

// fleetStatusRuns is how many times the command runs; the verdict takes the slowest.
const fleetStatusRuns = 3

// fleet: section 6, `capi-inplace fleet status` over a seeded fleet of single-node
// clusters, timed as an operator waits for it (process start to exit).
func (r *runner) fleet(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	n := r.o.fleetClusters
	logf("fleet: seeding %d single-node clusters", n)
	t0 := time.Now()
	if err := bench.SeedFleet(ctx, r.c, n); err != nil {
		return err
	}
	logf("fleet: seeded in %s", time.Since(t0).Round(time.Second))
	binary := filepath.Join(r.bin, "capi-inplace")
	var walls []time.Duration
	var summary string
	for range fleetStatusRuns {
		run, err := bench.RunFleetStatus(ctx, binary, r.env.Kubeconfig)
		if err != nil {
			return err
		}
		walls = append(walls, run.Wall)
		summary = run.Summary
	}
	// Other sections' Clusters share the API server: the command lists every
	// namespace, so it must have seen at least the seeded ones.
	var listed int
	if _, err := fmt.Sscanf(summary, "%d clusters:", &listed); err != nil || listed < n {
		return fmt.Errorf("fleet status listed %q, want at least %d clusters", summary, n)
	}
	all := make([]string, len(walls))
	for i, w := range walls {
		all[i] = w.Round(10 * time.Millisecond).String()
	}
	slowest := slices.Max(walls)
	r.rows = append(r.rows, bench.Row{Section: "6",
		Measurement: fmt.Sprintf("`capi-inplace fleet status -A` (table), %d seeded single-node clusters and their Machines (%d Clusters listed in all), management cluster only: wall time from process start to exit, slowest of %d runs (all runs)", n, listed, fleetStatusRuns),
		Ours:        fmt.Sprintf("%s (%s)", slowest.Round(10*time.Millisecond), strings.Join(all, ", ")),
		Target:      fmt.Sprintf("< %s", fleetStatusTarget), Verdict: bench.Verdict(slowest < fleetStatusTarget)})
	return nil
}
