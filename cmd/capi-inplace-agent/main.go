// Command capi-inplace-agent is the node agent, the process of the DaemonSet that
// the extension installs in every workload cluster (image capi-inplace-agent). It
// links only what a node needs: no extension, no CLI, no simulated host
// (test/productdeps checks its dependency list).
//
//	capi-inplace-agent --host-root=/host          # $NODE_NAME names the node
//	capi-inplace-agent agent --host-root=/host    # the same: the DaemonSet's arguments
//
// The command tree is agentcmd.NewBinaryCommand's.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/capi-inplace/capi-inplace/internal/agent/agentcmd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	root := agentcmd.NewBinaryCommand(version)
	// SIGTERM from the kubelet ends the agent between journal writes; the journal
	// makes any point safe to stop at.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
