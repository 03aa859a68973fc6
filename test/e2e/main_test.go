//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// suite is the one stack shared by every scenario of the test binary; each scenario
// works in its own namespace.
var suite struct {
	stack     *localstack.Stack
	root      string
	artifacts string
	ctx       context.Context
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	suite.root = repoRoot()
	suite.artifacts = filepath.Join(suite.root, "_artifacts", "e2e-"+time.Now().UTC().Format("20060102-150405"))
	if err := os.MkdirAll(suite.artifacts, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suite.ctx = ctx

	bin := filepath.Join(suite.root, "bin")
	start := time.Now()
	stack, err := localstack.Start(ctx, localstack.Options{
		BinDir:       bin,
		ArtifactsDir: suite.artifacts,
		Out:          os.Stdout,
		KeepTemp:     os.Getenv("E2E_KEEP_TEMP") != "",
		// E2E_DIRECT_WORKLOAD_API=1: agents without the gap-filling proxy (README.md).
		DirectWorkloadAPI: os.Getenv("E2E_DIRECT_WORKLOAD_API") != "",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start stack:", err)
		return 1
	}
	suite.stack = stack
	fmt.Printf("e2e: stack up in %s; logs in %s\n", time.Since(start).Round(time.Millisecond), suite.artifacts)

	// Tear down on SIGINT/SIGTERM and shortly before go test's own -timeout panics
	// (a panic skips deferred calls and cleanups), then exit.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var watchdog <-chan time.Time
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			margin := 30 * time.Second
			if d > 2*margin {
				watchdog = time.After(d - margin - time.Since(start))
			}
		}
	}
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "e2e: %v: tearing the stack down\n", s)
		case <-watchdog:
			fmt.Fprintln(os.Stderr, "e2e: test time-out about to fire: tearing the stack down")
		case <-ctx.Done():
			return
		}
		cancel()
		stack.Stop()
		os.Exit(2)
	}()

	code := m.Run()
	cancel()
	stack.Stop()
	return code
}
