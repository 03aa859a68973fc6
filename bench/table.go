package bench

import (
	"fmt"
	"strings"
	"time"
)

// Row is one line of the results table.
type Row struct {
	Section     string
	Measurement string
	Ours        string
	Baseline    string // upstream test extension, or the null extension
	Ratio       string // ours / baseline
	Target      string
	Verdict     string // "ok", "MISSED", or "" when there is no target
}

// Table renders rows as Markdown.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| # | measurement | capi-inplace | baseline | ratio | target | |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Section, r.Measurement, r.Ours, r.Baseline, r.Ratio, r.Target, r.Verdict)
	}
	return b.String()
}

// Ratio formats a/b, or "-" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// Verdict is "ok" when pass, else "MISSED".
func Verdict(pass bool) string {
	if pass {
		return "ok"
	}
	return "MISSED"
}

// latency formats p50 / p99.
func latency(s Summary) string { return ms(s.P50) + " / " + ms(s.P99) }

// HookRows turns one hook's measures (ours first, then the baseline) into rows.
// compare says whether "no worse than upstream" applies: not to UpdateMachine,
// where upstream's fake answers from memory and ours reads the clusters.
func HookRows(section string, rate float64, ours, base HookMeasure, p99Target time.Duration, compare bool) []Row {
	name := ours.Hook
	rows := []Row{
		{Section: section, Measurement: fmt.Sprintf("%s p50 / p99 at %.0f req/s (open loop, n=%d)", name, rate, ours.Open.Count),
			Ours: latency(ours.Open), Baseline: latency(base.Open), Ratio: Ratio(float64(ours.Open.P99), float64(base.Open.P99)) + " (p99)",
			Target: "p99 < " + ms(p99Target), Verdict: Verdict(ours.Open.P99 < p99Target && ours.Open.Errors == 0 && ours.Open.Dropped == 0)},
		{Section: section, Measurement: name + " saturation throughput (closed loop; p99)",
			Ours:     fmt.Sprintf("%.0f req/s (%s)", ours.Sat.Throughput, ms(ours.Sat.P99)),
			Baseline: fmt.Sprintf("%.0f req/s (%s)", base.Sat.Throughput, ms(base.Sat.P99)),
			Ratio:    Ratio(ours.Sat.Throughput, base.Sat.Throughput), Target: "no worse than upstream (ratio ≥ 0.95: run-to-run noise)",
			Verdict: Verdict(ours.Sat.Throughput >= 0.95*base.Sat.Throughput)},
		{Section: section, Measurement: name + " allocations / CPU per request (server process)",
			Ours:     fmt.Sprintf("%.0f allocs, %s", ours.AllocsPerReq, us(ours.CPUPerReq)),
			Baseline: fmt.Sprintf("%.0f allocs, %s", base.AllocsPerReq, us(base.CPUPerReq)),
			Ratio:    Ratio(ours.AllocsPerReq, base.AllocsPerReq) + " / " + Ratio(float64(ours.CPUPerReq), float64(base.CPUPerReq))},
	}
	if !compare {
		rows[1].Target, rows[1].Verdict = "- (upstream's fake does no reads)", ""
		rows = append(rows, Row{Section: section, Measurement: name + " API requests per call (the process's client-go rest_client_requests_total over the open-loop runs)",
			Ours: fmt.Sprintf("%.2f", ours.RequestsPerReq), Baseline: fmt.Sprintf("%.2f", base.RequestsPerReq),
			Target: "≤ 1", Verdict: Verdict(ours.RequestsPerReq <= 1)})
	}
	return rows
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.0f µs CPU", float64(d)/float64(time.Microsecond))
}
