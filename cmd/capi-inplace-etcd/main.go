// Command capi-inplace-etcd is the node agent's etcd helper, shipped in the agent's
// image beside capi-inplace-agent: the agent runs it for a control-plane node's
// etcd status, health, quorum, snapshot and restore (internal/agent/etcd.Local),
// so that only this short-lived process links etcd's client and etcdutl
// (internal/agent/etcd/etcdhelper). See etcdhelper.Usage for its command line.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdhelper"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := etcdhelper.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
