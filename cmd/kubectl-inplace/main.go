// Command kubectl-inplace is capi-inplace's operator CLI as a kubectl plugin:
// installed on PATH, it runs as `kubectl inplace status|plan|version`, with kubectl's
// flags (--kubeconfig, --context, -n, -A, -o json|yaml|wide) and the exit codes of
// docs/cli.md. It is the same code as `capi-inplace status|plan` (internal/cli) and
// links neither the extension nor any test harness (test/productdeps).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/capi-inplace/capi-inplace/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewPluginCommand(version).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
	}
	os.Exit(cli.ExitCode(err))
}
