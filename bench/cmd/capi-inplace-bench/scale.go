package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/bench"
	"github.com/capi-inplace/capi-inplace/internal/extension"
)

// scale: section 4, the extension with many clusters and machines in the
// management cluster, every machine mid-update (waiting for its agent).
func (r *runner) scale(ctx context.Context) error {
	if err := r.ensureServers(ctx); err != nil {
		return err
	}
	before, err := bench.ReadProc(r.ours.Proc.Pid())
	if err != nil {
		return err
	}
	// Priming goes through an in-process server without client-side rate limits:
	// the binary's per-cluster 5 QPS would make it take minutes.
	h, err := bench.NewHandlers(r.env.Config, r.env.Scheme, true)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	primer, err := bench.StartInProcess(sctx, inProcessLive, h, r.tmp)
	if err != nil {
		return err
	}
	n := r.o.clusters * r.o.machinesPerCluster
	logf("scale: creating %d clusters with %d machines each and driving them to the waiting step", r.o.clusters, r.o.machinesPerCluster)
	perCluster := make([][]bench.Call, r.o.clusters)
	errs := make([]error, r.o.clusters)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range r.o.clusters {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			objs := bench.ClusterObjects{Namespace: fmt.Sprintf("scale-%02d", i), Cluster: "edge", Machines: r.o.machinesPerCluster, Kubeconfig: r.env.KubeconfigData}
			machines, err := objs.Create(ctx, r.c)
			if err != nil {
				errs[i] = err
				return
			}
			calls, err := updateCalls(ctx, r.c, machines)
			if err != nil {
				errs[i] = err
				return
			}
			errs[i] = bench.DriveToWaiting(ctx, primer.Client, r.c, machines, calls)
			perCluster[i] = calls
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Interleave clusters, as CAPI's calls for a fleet would be.
	var calls []bench.Call
	for j := range r.o.machinesPerCluster {
		for i := range r.o.clusters {
			calls = append(calls, perCluster[i][j])
		}
	}
	msCall, err := bench.Encode(runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet, bench.CanUpdateMachineSetRequest())
	if err != nil {
		return err
	}
	opts := r.loadOptions()
	opts.SatWorkers = 0
	opts.Rounds = min(opts.Rounds, 2)
	label := fmt.Sprintf("%d clusters, %d machines", r.o.clusters, n)
	// CAPI calls UpdateMachine again after retryAfterSeconds (5 s while waiting):
	// n machines mid-update make n/5 calls per second.
	capiRate := float64(n) / 5
	for _, load := range []struct {
		name  string
		rate  float64
		calls []bench.Call
		s     *bench.Server
	}{
		{"UpdateMachine", capiRate, calls, r.ours},
		{"UpdateMachine", r.o.rate, calls, r.ours},
		{"UpdateMachine", r.o.rate, calls, primer},
		{"CanUpdateMachineSet", r.o.rate, []bench.Call{msCall}, r.ours},
	} {
		logf("scale: %s at %.0f req/s on %s", load.name, load.rate, load.s.Name)
		o := opts
		o.Rate = load.rate
		res, err := bench.MeasureHook(ctx, load.name, []*bench.Server{load.s}, map[string][]bench.Call{load.s.Name: load.calls}, o)
		if err != nil {
			r.rows = append(r.rows, bench.Row{Section: "4", Measurement: fmt.Sprintf("%s at %.0f req/s, %s (%s)", load.name, load.rate, label, load.s.Name),
				Ours: "failed: " + short(err.Error(), 160), Target: "p99 < 10.00 ms", Verdict: "MISSED"})
			continue
		}
		m := res[0].Open
		ours := fmt.Sprintf("%s / %s", ms(m.P50), ms(m.P99))
		if load.s.Proc != nil {
			ours += fmt.Sprintf(" (%.2f API requests per call)", res[0].RequestsPerReq)
		}
		row := bench.Row{Section: "4",
			Measurement: fmt.Sprintf("%s p50 / p99 at %.0f req/s, %s (%s, n=%d)", load.name, load.rate, label, load.s.Name, m.Count),
			Ours:        ours, Target: "p99 < 10.00 ms", Verdict: bench.Verdict(m.P99 < p99Target)}
		if load.s == primer {
			// The in-process server has no caches: every call reads live, as a call
			// that writes or decides does. The target is the steady state's.
			row.Target, row.Verdict = liveReadsTarget, ""
		}
		r.rows = append(r.rows, row)
	}
	after, err := bench.ReadProc(r.ours.Proc.Pid())
	if err != nil {
		return err
	}
	upNow, err := bench.ReadProc(r.up.Proc.Pid())
	if err != nil {
		return err
	}
	r.rows = append(r.rows, bench.Row{Section: "4", Measurement: "extension RSS idle (2 s after start)",
		Ours: bench.MiB(r.oursIdle.RSS), Baseline: "upstream " + bench.MiB(r.upIdle.RSS),
		Ratio: bench.Ratio(float64(r.oursIdle.RSS), float64(r.upIdle.RSS)), Target: "≤ 1.5 × upstream",
		Verdict: bench.Verdict(float64(r.oursIdle.RSS) <= 1.5*float64(r.upIdle.RSS))})
	r.rows = append(r.rows, bench.Row{Section: "4",
		Measurement: fmt.Sprintf("extension RSS: idle at start → before seeding → after the %s loads (peak)", label),
		Ours: fmt.Sprintf("%s → %s → %s (peak %s; anon %s)", bench.MiB(r.oursIdle.RSS), bench.MiB(before.RSS), bench.MiB(after.RSS),
			bench.MiB(after.HWM), bench.MiB(after.Anon)),
		Baseline: fmt.Sprintf("upstream idle %s, now %s (peak %s)", bench.MiB(r.upIdle.RSS), bench.MiB(upNow.RSS), bench.MiB(upNow.HWM)),
		Ratio:    bench.Ratio(float64(after.RSS), float64(upNow.RSS)), Target: "≤ 2 × upstream",
		Verdict: bench.Verdict(float64(after.RSS) <= 2*float64(upNow.RSS))})
	return nil
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
