package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
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

// CPUSnapshot is the CPU time of every process on the machine at one moment, by
// pid, with the name ProcessName gives it.
type CPUSnapshot map[int]NamedCPU

// NamedCPU is one process's name and CPU time (utime + stime).
type NamedCPU struct {
	Name string
	CPU  time.Duration
}

// SnapshotCPU reads every process's CPU time from /proc; processes that end while
// it reads are skipped.
func SnapshotCPU() CPUSnapshot {
	s := CPUSnapshot{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return s
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		cpu, err := parseStatCPU(string(stat))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		s[pid] = NamedCPU{Name: ProcessName(stat, cmdline), CPU: cpu}
	}
	return s
}

// ProcessName names a process for CPUSnapshot: its executable's base name, with
// the first argument for the binaries that run several roles
// (`capi-inplace extension`, `capi-inplace-dev agent`); a kernel thread (no command
// line) by its stat name.
func ProcessName(stat, cmdline []byte) string {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) == 0 || args[0] == "" {
		s := string(stat)
		if i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')'); i >= 0 && j > i {
			return s[i+1 : j]
		}
		return "?"
	}
	name := args[0][strings.LastIndexByte(args[0], '/')+1:]
	if (name == "capi-inplace" || name == "capi-inplace-dev") && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
	}
	return name
}

// CPUSince is the CPU time each process name used from before to s, largest first;
// a process that started in between counts from zero, one that ended is lost.
func (s CPUSnapshot) CPUSince(before CPUSnapshot) []NamedCPU {
	by := map[string]time.Duration{}
	for pid, p := range s {
		prev := before[pid]
		if prev.Name != p.Name {
			prev.CPU = 0 // a pid reused by another process
		}
		if d := p.CPU - prev.CPU; d > 0 {
			by[p.Name] += d
		}
	}
	out := make([]NamedCPU, 0, len(by))
	for name, d := range by {
		out = append(out, NamedCPU{Name: name, CPU: d})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CPU != out[j].CPU {
			return out[i].CPU > out[j].CPU
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// FormatCPU writes the first n entries and the total, e.g.
// "total 38.1s: kube-apiserver 19.7s, capi-core-manager 6.1s".
func FormatCPU(cpu []NamedCPU, n int) string {
	var total time.Duration
	for _, c := range cpu {
		total += c.CPU
	}
	parts := make([]string, 0, n)
	for i, c := range cpu {
		if i == n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1fs", c.Name, c.CPU.Seconds()))
	}
	return fmt.Sprintf("total %.1fs: %s", total.Seconds(), strings.Join(parts, ", "))
}
