package agentcmd

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
)

// serveMetrics listens on addr before it returns (a port in use is an error at
// start, not a log line later) and serves h at /metrics until stop.
func serveMetrics(addr string, h http.Handler, log logr.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Metrics endpoint stopped", "address", addr)
		}
	}()
	log.Info("Serving metrics", "address", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}
