// Command capi-inplace-cel is the node agent's CEL helper, shipped in the agent's
// image beside capi-inplace-agent: the agent runs it for every poll of a CEL health
// gate (internal/agent/celrun), so that only this short-lived process links cel-go
// (internal/celgate/celhelper). See celhelper.Usage for its command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/capi-inplace/capi-inplace/internal/celgate/celhelper"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := celhelper.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
