package extension

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/capi-inplace/capi-inplace/internal/connlimit"
)

// shutdownGrace bounds how long Start waits for requests in flight once its
// context ends (the manager's own graceful shutdown is shorter).
const shutdownGrace = 30 * time.Second

// boundedServer is a webhook.Server whose port enforces the request limits: the
// handlers registered on it are wrapped (limits.go), and it listens and serves
// itself, because controller-runtime's server fixes its connection timeouts (32 s to
// send the headers, none for idle connections) and bounds no connections.
// Registration and the request metrics are controller-runtime's (the embedded
// server, never started).
type boundedServer struct {
	webhook.Server
	opts    ServerOptions
	limits  *requestLimits
	started atomic.Bool
}

var _ webhook.Server = &boundedServer{}

func newBoundedServer(opts ServerOptions, process *processBudget) (*boundedServer, error) {
	limits, err := newRequestLimits(opts.MaxRequestBodyBytes, opts.MaxInFlightBodyBytes, process)
	if err != nil {
		return nil, err
	}
	if opts.Port <= 0 {
		opts.Port = webhook.DefaultPort
	}
	inner := webhook.NewServer(webhook.Options{Host: opts.Host, Port: opts.Port, CertDir: opts.CertDir})
	return &boundedServer{Server: inner, opts: opts, limits: limits}, nil
}

// Register serves hook at path within the request limits.
func (s *boundedServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, s.limits.wrap(hook))
}

// Start serves until ctx ends, then lets requests in flight finish (up to
// shutdownGrace).
func (s *boundedServer) Start(ctx context.Context) error {
	certs, err := certwatcher.New(filepath.Join(s.opts.CertDir, "tls.crt"), filepath.Join(s.opts.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	go func() { _ = certs.Start(ctx) }()
	cfg := &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	for _, opt := range s.opts.TLSOpts {
		opt(cfg)
	}
	cfg.GetCertificate = certs.GetCertificate

	l, err := net.Listen("tcp", s.address())
	if err != nil {
		return err
	}
	l = tls.NewListener(connlimit.Listen(l, connlimit.Limits{Total: maxConns, PerClient: maxConnsPerClient}), cfg)
	srv := &http.Server{
		Handler:           s.WebhookMux(),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: readHeaderTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// HTTP/1.1 only: the connection bounds count requests in flight only when a
		// connection carries one at a time.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		stopped <- srv.Shutdown(sctx)
	}()
	s.started.Store(true)
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return <-stopped
}

// StartedChecker is healthy once the server accepts TLS connections.
func (s *boundedServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("webhook server has not been started yet")
		}
		d := &net.Dialer{Timeout: 10 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", s.address(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reachability only
		if err != nil {
			return fmt.Errorf("webhook server is not reachable: %w", err)
		}
		return conn.Close()
	}
}

func (s *boundedServer) address() string {
	return net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}
