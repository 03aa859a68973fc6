package agentcmd

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/capi-inplace/capi-inplace/internal/connlimit"
)

// Bounds of the agent's health and metrics endpoints. They listen on the host
// network, where every pod of the node can reach them; their clients (the kubelet's
// probe, a Prometheus scrape) hold a connection or two each. Without bounds, idle
// keep-alive connections of one pod would pile up in a privileged process.
const (
	endpointMaxConns          = 64
	endpointMaxConnsPerClient = 8
	endpointReadTimeout       = 5 * time.Second
	endpointWriteTimeout      = 10 * time.Second
	endpointIdleTimeout       = 10 * time.Second
	endpointMaxHeaderBytes    = 8 << 10
)

// serveEndpoint listens on addr before it returns (a port in use is an error at
// start, not a log line later) and serves h until stop, within the endpoint bounds.
func serveEndpoint(flag, addr string, h http.Handler, log logr.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	l = connlimit.Listen(l, connlimit.Limits{Total: endpointMaxConns, PerClient: endpointMaxConnsPerClient})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: endpointReadTimeout,
		ReadTimeout:       endpointReadTimeout,
		WriteTimeout:      endpointWriteTimeout,
		IdleTimeout:       endpointIdleTimeout,
		MaxHeaderBytes:    endpointMaxHeaderBytes,
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Endpoint stopped", "flag", flag, "address", addr)
		}
	}()
	log.Info("Serving endpoint", "flag", flag, "address", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// serveMetrics serves h at /metrics on addr (serveEndpoint).
func serveMetrics(addr string, h http.Handler, log logr.Logger) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	return serveEndpoint("--metrics-addr", addr, mux, log)
}

// serveHealth answers "ok" on addr (serveEndpoint): the process is up.
func serveHealth(addr string, log logr.Logger) (stop func(), err error) {
	return serveEndpoint("--health-addr", addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	}), log)
}
