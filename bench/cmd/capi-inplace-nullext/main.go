// Command capi-inplace-nullext serves the null extension (bench/nullext) over
// HTTPS: capi-inplace's CanUpdate answers, and every UpdateMachine done at once.
// The rollout benchmark registers it beside capi-inplace as the floor.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/textlogger"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/capi-inplace/capi-inplace/bench/nullext"
	"github.com/capi-inplace/capi-inplace/internal/extension"
)

func main() {
	var opts extension.ServerOptions
	flag.IntVar(&opts.Port, "webhook-port", 9443, "Port of the hook server (HTTPS).")
	flag.StringVar(&opts.Host, "webhook-host", "127.0.0.1", "Address the hook server listens on.")
	flag.StringVar(&opts.CertDir, "webhook-cert-dir", "", "Directory with tls.crt and tls.key.")
	flag.Parse()
	ctrl.SetLogger(textlogger.NewLogger(textlogger.NewConfig()))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "capi-inplace-nullext:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts extension.ServerOptions) error {
	h, err := nullext.NewHandlers(prometheus.NewRegistry())
	if err != nil {
		return err
	}
	srv, err := extension.NewServer(h, opts)
	if err != nil {
		return err
	}
	ctrl.Log.Info("Serving the null extension", "host", opts.Host, "port", opts.Port)
	return srv.Start(ctx)
}
