package main

import (
	"context"
	"fmt"

	"github.com/capi-inplace/capi-inplace/bench"
)

// Issue 15 §1: the node agent's idle memory and the product binaries' sizes.
const (
	agentRSSTarget    = 30 << 20 // bytes, idle RSS of capi-inplace-agent
	agentBinaryTarget = 40e6     // bytes on disk of capi-inplace-agent
)

// footprint: section 3, the product agent (capi-inplace-agent) idle beside a bare
// client-go Node informer in the same run, and the binaries' sizes. It runs in the
// agent section (`-sections agent`).
func (r *runner) footprint(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	f, err := bench.MeasureFootprint(ctx, r.env, r.bin, r.tmp, r.logDir, r.o.agentIdle)
	if err != nil {
		return err
	}
	rss := func(s bench.ProcStat) string {
		return fmt.Sprintf("%s (anon %s, file-backed %s)", bench.MiB(s.RSS), bench.MiB(s.Anon), bench.MiB(s.File))
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	agentSize, extSize, informerSize := f.Sizes[bench.AgentBinary], f.Sizes[bench.ExtensionBinary], f.Sizes[bench.InformerBinary]
	r.rows = append(r.rows,
		bench.Row{Section: "3", Measurement: fmt.Sprintf("idle node agent RSS (`capi-inplace-agent`, real host mode, no plan) vs a bare client-go Node informer, same API server, after %s", f.Window.Round(1e9)),
			Ours: rss(f.Agent), Baseline: rss(f.Informer), Ratio: bench.Ratio(float64(f.Agent.RSS), float64(f.Informer.RSS)),
			Target: "< 30 MiB", Verdict: bench.Verdict(f.Agent.RSS < agentRSSTarget)},
		bench.Row{Section: "3", Measurement: "idle node agent CPU (utime+stime in the same window) vs the informer",
			Ours: f.AgentCPU.String(), Baseline: f.InformerCPU.String()},
		bench.Row{Section: "3", Measurement: "binary size: `capi-inplace-agent` vs the bare informer (both `make build` flags)",
			Ours: mb(agentSize), Baseline: mb(informerSize), Ratio: bench.Ratio(float64(agentSize), float64(informerSize)),
			Target: "< 40 MB", Verdict: bench.Verdict(agentSize < agentBinaryTarget)},
		bench.Row{Section: "3", Measurement: "binary size: `capi-inplace` (extension and CLI, no test harness)", Ours: mb(extSize)},
		bench.Row{Section: "3", Measurement: "binary size: `capi-inplace-etcd` (the agent's etcd helper, beside it in its image; runs only for a control-plane node's etcd snapshot, health, quorum and restore)",
			Ours: mb(f.Sizes[bench.EtcdHelperBinary])},
		bench.Row{Section: "3", Measurement: "binary size: `capi-inplace-cel` (the agent's CEL helper, beside it in its image; runs only for a poll of a CEL gate, so the agent links no cel-go)",
			Ours: mb(f.Sizes[bench.CELHelperBinary])},
	)
	return nil
}
