package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// Options configure Run.
type Options struct {
	// BinDir holds the stack's binaries and capi-inplace (make tools-capi build).
	BinDir string
	// ArtifactsDir receives every process's log.
	ArtifactsDir string
	// Timeout bounds everything up to the summary (default 15m); --keep's wait is not
	// counted.
	Timeout time.Duration
	// Keep leaves the stack running after the summary until ctx is cancelled.
	Keep bool
	// Out receives the demo's output; TTY makes the live view redraw in place.
	Out io.Writer
	TTY bool
	// Width is the terminal's width when TTY (0: unknown).
	Width int
	// Interval between two live frames (default 1s).
	Interval time.Duration
	// PortWait is how long to wait for the in-memory provider's port when another stack
	// holds it; zero fails at once.
	PortWait time.Duration
	// Nodes are what the cluster runs on (default: Simulated).
	Nodes Nodes
}

// The demo's objects and names.
const (
	Namespace   = "demo"
	ClusterName = "demo"
	className   = "inplace"
	// extensionLabel selects the demo namespace for our ExtensionConfig and the hold webhook.
	extensionLabel = "demo.capi-inplace.dev/extension"
	// FilePath is the file the demo changes on every node (the ClusterClass files variable).
	FilePath    = "/etc/capi-inplace-demo/motd"
	fileBefore  = "hello from the first version\n"
	fileAfter   = "upgraded in place by capi-inplace\n"
	workers     = 2
	machinesAll = 1 + workers
	// inMemoryPort is the fixed port of upstream's in-memory provider (CAPI v1.14.2,
	// not configurable): one local stack per machine.
	inMemoryPort = 19000
)

func (o *Options) defaults() {
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Minute
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Nodes == nil {
		o.Nodes = &Simulated{}
	}
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = filepath.Join("_artifacts", "demo-"+time.Now().UTC().Format("20060102-150405"))
	}
}

// ErrChecksFailed is returned when the rollout ran but a summary check failed.
var ErrChecksFailed = errors.New("demo: a summary check failed")

// run holds the demo's state between phases.
type run struct {
	o        Options
	from, to string
	start    time.Time
	stack    *localstack.Stack
	nodes    []string
	stackLn  *switchWriter
}

// Run runs the demo (see the package doc). It returns ErrChecksFailed (wrapped) when a
// check of the summary fails, and tears everything down before returning.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	r := &run{o: o, start: time.Now()}
	r.from, r.to = o.Nodes.Versions()
	defer o.Nodes.Close()
	if err := waitPort(ctx, inMemoryPort, o.PortWait); err != nil {
		return err
	}
	for _, d := range []*string{&r.o.BinDir, &r.o.ArtifactsDir} {
		abs, err := filepath.Abs(*d)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		*d = abs
	}
	if err := os.MkdirAll(r.o.ArtifactsDir, 0o755); err != nil {
		return fmt.Errorf("demo: create artifacts dir: %w", err)
	}
	logFile, err := os.Create(filepath.Join(r.o.ArtifactsDir, "localstack.log"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	r.stackLn = &switchWriter{file: logFile, console: o.Out, prefix: "    "}

	tctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	defer func() {
		if r.stack != nil {
			r.stackLn.setConsole(true)
			r.printf("==> tearing down: stopping every process and removing %s\n", r.stack.TempRoot)
			r.stack.Stop()
		}
	}()
	err = r.demo(tctx, ctx)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("demo interrupted: %w", ctx.Err())
	}
	if err != nil && tctx.Err() != nil && !errors.Is(err, ErrChecksFailed) {
		return fmt.Errorf("demo: time-out after %s (--timeout): %w", o.Timeout, err)
	}
	return err
}

func (r *run) printf(format string, args ...any) {
	fmt.Fprintf(r.o.Out, format, args...)
}

func (r *run) phase(n int, what string) func(format string, args ...any) {
	t0 := time.Now()
	r.printf("==> [%d/6] %s\n", n, what)
	return func(format string, args ...any) {
		r.printf("    %s (%s)\n", fmt.Sprintf(format, args...), time.Since(t0).Round(100*time.Millisecond))
	}
}

// demo runs the phases; ctx is bounded by --timeout, outer is the command's context
// (--keep waits on it).
func (r *run) demo(ctx, outer context.Context) error {
	o := r.o
	done := r.phase(1, "local Cluster API stack: kube-apiserver + etcd, core, KubeadmControlPlane, kubeadm bootstrap and Dev managers ("+o.Nodes.Provider()+")")
	stackOpts := localstack.Options{BinDir: o.BinDir, ArtifactsDir: o.ArtifactsDir, Out: r.stackLn}
	o.Nodes.StackOptions(&stackOpts)
	stack, err := localstack.Start(ctx, stackOpts)
	if err != nil {
		return fmt.Errorf("start the local stack: %w", err)
	}
	r.stack = stack
	done("control plane and managers ready, logs in %s", o.ArtifactsDir)

	done = r.phase(2, "capi-inplace extension over HTTPS, registered with Cluster API")
	labels := map[string]string{extensionLabel: "capi-inplace"}
	ext, err := stack.StartExtension(ctx, o.Nodes.Extension(o.BinDir, "capi-inplace", labels))
	if err != nil {
		return fmt.Errorf("start the extension: %w", err)
	}
	if err := registerHoldWebhook(ctx, stack, ext, labels); err != nil {
		return err
	}
	done("extension serving on 127.0.0.1:%d; ExtensionConfig capi-inplace discovered; single-node hold webhook registered", ext.Port)

	done = r.phase(3, fmt.Sprintf("ClusterClass cluster %s/%s at %s: 1 control-plane node (single-node path) + %d workers", Namespace, ClusterName, r.from, workers))
	if err := r.createCluster(ctx); err != nil {
		return err
	}
	if err := r.waitClusterReady(ctx); err != nil {
		return err
	}
	done("all %d machines running", machinesAll)

	done = r.phase(4, o.Nodes.Agents())
	r.stackLn.setConsole(false)
	if r.nodes, err = o.Nodes.AttachAgents(ctx, stack, Namespace, ClusterName, machinesAll); err != nil {
		return err
	}
	before, err := r.machineIDs(ctx)
	if err != nil {
		return err
	}
	done("nodes %v", r.nodes)
	for _, m := range before {
		r.printf("    machine %-32s %-14s uid %s node %s\n", m.Name, m.Role, m.UID, m.Node)
	}

	r.phase(5, fmt.Sprintf("one update: spec.topology.version %s -> %s and %s changed (files variable)", r.from, r.to, FilePath))
	w, err := r.watchMachines(ctx)
	if err != nil {
		return err
	}
	defer w.stop()
	rolloutStart := time.Now()
	if err := r.changeTopology(ctx); err != nil {
		return err
	}
	tl := &Timeline{From: rolloutStart, ToVersion: r.to}
	agentDur, rolloutErr := r.live(ctx, rolloutStart, w, tl)
	rollout := time.Since(rolloutStart)

	r.phase(6, "checks")
	out := r.outcome(context.WithoutCancel(ctx), before, w, tl.Durations(), agentDur)
	out.RolloutErr, out.Rollout, out.Total = rolloutErr, rollout, time.Since(r.start)
	checks := Evaluate(out)
	if err := RenderSummary(o.Out, out, checks); err != nil {
		return err
	}
	var result error
	if !Passed(checks) {
		result = fmt.Errorf("%w (logs in %s)", ErrChecksFailed, o.ArtifactsDir)
	}
	if o.Keep && outer.Err() == nil {
		r.stackLn.setConsole(true)
		bin := filepath.Join(o.BinDir, "capi-inplace")
		r.printf("\nThe stack keeps running (--keep). Ctrl-C tears it down.\n")
		r.printf("  management kubeconfig: %s\n", stack.KubeconfigPath)
		r.printf("  kubectl --kubeconfig %s get clusters,machines -A\n", stack.KubeconfigPath)
		r.printf("  %s status %s -n %s --kubeconfig %s -w\n", bin, ClusterName, Namespace, stack.KubeconfigPath)
		for _, hint := range o.Nodes.KeepHints() {
			r.printf("  %s\n", hint)
		}
		r.printf("  logs: %s\n", o.ArtifactsDir)
		<-outer.Done()
	}
	return result
}

// waitPort fails (or waits up to wait) while something listens on port.
func waitPort(ctx context.Context, port int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err == nil {
			_ = l.Close()
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("demo: port %d is in use: another local Cluster API stack (a demo, `make e2e` or `make bench`) runs on this machine, "+
				"and upstream's in-memory provider can only run once per machine (fixed port). Stop it, or run the demo in its own "+
				"network namespace: sudo unshare -n bench/netns.sh bin/capi-inplace-dev demo (%w)", port, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// switchWriter sends the stack's progress lines to its log file and, while console is
// on, to the demo's output (indented); the live view turns it off so that its redraw
// is not broken by other lines.
type switchWriter struct {
	mu      sync.Mutex
	file    io.Writer
	console io.Writer
	prefix  string
	off     bool
}

func (w *switchWriter) setConsole(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.off = !on
}

func (w *switchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.file.Write(p)
	if !w.off {
		_, _ = io.WriteString(w.console, w.prefix+string(p))
	}
	return len(p), nil
}
