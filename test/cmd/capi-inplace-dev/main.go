// Command capi-inplace-dev is the test harness binary, never shipped: the demo
// (`capi-inplace-dev demo`: a local Cluster API stack with simulated nodes) and
// the simulated node agent (`capi-inplace-dev agent --simulate`) that the demo,
// the e2e scenarios, the integration tests and the bench run once per Node.
//
// The agent is the product's (internal/agent/agentcmd, as in capi-inplace-agent);
// only the host's edges are simulated (internal/agent/simhost and the simulated OS
// backend). Keeping this binary apart is what keeps the local stack (envtest), the
// demo and the simulator out of the product binaries (test/productdeps).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/capi-inplace/capi-inplace/internal/agent/agentcmd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "capi-inplace-dev",
		Short:         "capi-inplace's test harness: the local demo and the simulated node agent",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCommand(), agentcmd.NewCommand("agent", version, simulator))
	return root
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
