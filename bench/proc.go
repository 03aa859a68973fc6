package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ProcStat is a process's memory and CPU time, from /proc.
type ProcStat struct {
	RSS, HWM int64 // bytes: VmRSS, VmHWM (peak RSS)
	// RSS split: anonymous memory (Go heap, stacks) and file-backed pages (the
	// binary's text and data as mapped from disk).
	Anon, File int64
	CPU        time.Duration // utime + stime
}

// clockTick is USER_HZ, 100 on every Linux this runs on.
const clockTick = 100

// ReadProc reads /proc/<pid>/status and /proc/<pid>/stat.
func ReadProc(pid int) (ProcStat, error) {
	var s ProcStat
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		var dst *int64
		switch k {
		case "VmRSS":
			dst = &s.RSS
		case "VmHWM":
			dst = &s.HWM
		case "RssAnon":
			dst = &s.Anon
		case "RssFile":
			dst = &s.File
		}
		if !ok || dst == nil {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 1 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return s, fmt.Errorf("parse %s of pid %d: %w", k, pid, err)
		}
		*dst = kb * 1024
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	s.CPU, err = parseStatCPU(string(stat))
	if err != nil {
		return s, fmt.Errorf("pid %d: %w", pid, err)
	}
	return s, nil
}

// parseStatCPU returns utime+stime from a /proc/<pid>/stat line. The command name
// (field 2) may hold spaces, so fields count from its closing parenthesis.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// After ")": state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat %q", stat)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse utime/stime of %q", stat)
	}
	return time.Duration(ut+st) * time.Second / clockTick, nil
}

// MiB formats bytes as MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// ScrapeSum adds up every series of a counter or gauge (all label sets) from a
// Prometheus text endpoint (url is http://host:port/metrics); a metric with no
// series yet is 0. The exposition is parsed by Prometheus's own text parser.
func ScrapeSum(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return sumMetric(resp.Body, name)
}

// sumMetric sums the series of the metric family name in a text exposition.
func sumMetric(r io.Reader, name string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	sum := 0.0
	for _, m := range families[name].GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, nil
}
