// Command capi-inplace-bench runs capi-inplace's performance suite (`make bench`)
// and prints one Markdown results table, also written to --out.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-inplace/capi-inplace/bench"
)

func main() {
	o := options{}
	flag.StringVar(&o.binDir, "bin", "bin", "Directory with capi-inplace, capi-test-extension, kube-apiserver, etcd and capi-config/.")
	flag.StringVar(&o.out, "out", "_artifacts/bench.md", "Markdown file the table is written to.")
	flag.StringVar(&o.sections, "sections", "hooks,agent,scale,rollout,guard,fleet", "Comma-separated sections to run.")
	flag.Float64Var(&o.rate, "rate", 200, "Open-loop rate of the hook latency runs (requests/s).")
	flag.DurationVar(&o.duration, "duration", 4*time.Second, "Length of one open-loop run (per round and server).")
	flag.IntVar(&o.rounds, "rounds", 3, "Rounds per hook; the servers' order alternates.")
	flag.IntVar(&o.satWorkers, "sat-workers", 16, "Closed-loop workers of the saturation runs.")
	flag.DurationVar(&o.satDuration, "sat-duration", 2*time.Second, "Length of one saturation run.")
	flag.IntVar(&o.clusters, "scale-clusters", 50, "Clusters of the scale section.")
	flag.IntVar(&o.machinesPerCluster, "scale-machines", 10, "Machines per cluster of the scale section.")
	flag.IntVar(&o.fleetClusters, "fleet-clusters", 1000, "Single-node clusters seeded for the fleet section (timing capi-inplace fleet status).")
	flag.DurationVar(&o.agentIdle, "agent-idle", 30*time.Second, "Idle window of the agent footprint.")
	flag.IntVar(&o.publications, "publications", 20, "Plan publications for the agent's pick-up delay.")
	flag.DurationVar(&o.publishPause, "publish-pause", 2*time.Second, "Pause between plan publications (0: back to back, which measures the agent's client rate limit).")
	flag.IntVar(&o.rolloutWorkers, "rollout-workers", 30, "Workers of the MachineDeployment rollout (0: skip it).")
	flag.IntVar(&o.rolloutRounds, "rollout-rounds", 3, "Rounds per rollout pair; the order alternates (the verdict compares the fastest rounds: the null extension alone varies 16-24 s on the 3 + 30 round between runs).")
	flag.DurationVar(&o.waitStack, "wait-stack", 20*time.Minute, "How long the rollout waits for another local stack to free the in-memory provider's port.")
	flag.StringVar(&o.nullExt, "null-extension", "bin/capi-inplace-nullext", "The null extension binary (bench/cmd/capi-inplace-nullext).")
	extensionArgs := flag.String("extension-args", "", "Space-separated flags appended to capi-inplace extension's in every section, e.g. \"--v=2 --profiler-address=127.0.0.1:6060\" (the per-step call timing, a heap profile).")
	flag.Parse()
	o.extensionArgs = strings.Fields(*extensionArgs)
	// The in-process hook servers log through controller-runtime; the measured
	// binaries log to their files under the artifacts directory.
	ctrl.SetLogger(logr.Discard())

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	binDir, out, sections string
	rate                  float64
	duration              time.Duration
	rounds                int
	satWorkers            int
	satDuration           time.Duration
	clusters              int
	machinesPerCluster    int
	fleetClusters         int
	agentIdle             time.Duration
	publications          int
	publishPause          time.Duration
	rolloutWorkers        int
	rolloutRounds         int
	nullExt               string
	waitStack             time.Duration
	extensionArgs         []string
}

func (o options) has(section string) bool {
	for _, s := range strings.Split(o.sections, ",") {
		if strings.TrimSpace(s) == section {
			return true
		}
	}
	return false
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	bin, err := filepath.Abs(o.binDir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "capi-inplace-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logDir, err := filepath.Abs(filepath.Join(filepath.Dir(o.out), "bench-"+time.Now().UTC().Format("20060102-150405")))
	if err != nil {
		return err
	}
	r := &runner{o: o, bin: bin, tmp: tmp, logDir: logDir}
	defer r.stop()
	var notes []string
	step := func(name string, fn func(context.Context) error) {
		if !o.has(name) || ctx.Err() != nil {
			return
		}
		t0 := time.Now()
		logf("section %s: start", name)
		if err := fn(ctx); err != nil {
			logf("section %s: %v", name, err)
			notes = append(notes, fmt.Sprintf("- section %s failed: %v", name, err))
		}
		logf("section %s: done in %s", name, time.Since(t0).Round(time.Second))
	}
	// The rollout first: its stack (fixed ports of the in-memory provider) is the
	// section that can collide with another local stack on this machine.
	step("rollout", r.rollout)
	step("hooks", r.hooks)
	step("scale", r.scale)
	step("agent", r.agent)
	step("guard", r.guard)
	step("fleet", r.fleet)

	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s (%d CPUs shared), `%s`, in %s. Logs: `%s`.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), hostname(), numCPU(), strings.Join(os.Args, " "), time.Since(start).Round(time.Second), logDir)
	b.WriteString(bench.Table(r.rows))
	for _, n := range append(r.notes, notes...) {
		b.WriteString("\n" + n)
	}
	b.WriteString("\n")
	fmt.Print(b.String())
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.out, err)
	}
	if len(notes) > 0 {
		return fmt.Errorf("%d section(s) failed", len(notes))
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "?"
	}
	return h
}
