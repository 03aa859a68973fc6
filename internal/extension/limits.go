package extension

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/capi-inplace/capi-inplace/internal/connlimit"
)

// Request limits of the extension's HTTPS ports. Every hook and both admission
// webhooks use failurePolicy Fail, so one request that takes the extension down (its
// memory limit is 256Mi) or holds what every request needs blocks every in-place
// rollout and every write the webhooks judge. Each port has its own limits (the
// admission port is open to every pod; the hook port only to Cluster API), and
// within a port no client (remote IP address: neither Cluster API nor the API server
// presents a client certificate) can hold more than its share.
const (
	// DefaultMaxRequestBodyBytes bounds one request body. The handler tests' real
	// CanUpdateMachine request is under 5 KiB and upstream objects are a few KiB; a
	// node plan carries at most 768 KiB (nodeplan), so bootstrap configs much larger
	// than that cannot be updated in place anyway. CAPI's own limit is 20 MiB.
	// Decoding and planning costs up to about 70 times the body (measured with a body
	// of small JSON objects: 1 MiB peaked at 73 MiB of live heap, and the garbage
	// collector lets the heap reach about twice what is live), so this limit is what
	// keeps one request well inside the extension's 256Mi.
	DefaultMaxRequestBodyBytes = 1 << 20
	// DefaultMaxInFlightBodyBytes bounds, per port, the bodies being decoded and
	// handled at once, weighted by size: one maximum-size request at a time, or over
	// a hundred real ones (each weighs its body plus minRequestWeight). A request is
	// weighed only once its whole body is in, so a slow sender never holds it; later
	// requests wait for their share (up to their deadline) instead of failing. The
	// ports together hold at most a quarter more than one port (processBudget): two
	// maximum-size requests at once, one per port, peaked at 185 MiB of heap growth,
	// too close to 256Mi; every real request fits in the quarter one port cannot take
	// from the other.
	DefaultMaxInFlightBodyBytes = DefaultMaxRequestBodyBytes
	// receiveBudgetBytes bounds, per port, the memory of request bodies still being
	// received, counted as they arrive (a body of unknown or announced length costs
	// only what was sent); receivePerClientBytes is one client's share of it, room for
	// a few maximum-size bodies. A client over its share waits for its own requests
	// to move on (up to the body deadline, then 503).
	receiveBudgetBytes    = 16 << 20
	receivePerClientBytes = 4 << 20
	// readHeaderTimeout bounds the TLS handshake and the request line and headers;
	// bodyReadTimeout the body. A megabyte inside a cluster takes milliseconds; CAPI's
	// hook timeouts are 10 s (30 s for UpdateMachine), the API server's webhook
	// timeout 10 s.
	readHeaderTimeout = 5 * time.Second
	bodyReadTimeout   = 5 * time.Second
	// writeTimeout bounds a request from its headers to the end of its answer: above
	// UpdateMachine's 30 s.
	writeTimeout = 60 * time.Second
	// idleTimeout closes a kept-alive connection no request came on.
	idleTimeout = 60 * time.Second
	// maxHeaderBytes bounds the request line and headers (Cluster API and the API
	// server send well under a KiB).
	maxHeaderBytes = 64 << 10
	// maxConns and maxConnsPerClient bound each port's open connections (each costs
	// a goroutine and its TLS and bufio buffers, about 40 KiB); Cluster API's
	// controllers together call with a few dozen at most.
	maxConns          = 256
	maxConnsPerClient = 64
	// minRequestWeight is what a request of any size costs beyond its body (headers,
	// the decoded request and response).
	minRequestWeight = 4 << 10
	// receiveChunk is how much of a body is read at a time.
	receiveChunk = 32 << 10
)

// requestLimits wraps every handler of one port: it refuses bodies over maxBody
// with 413 before reading them whole, receives a body within bodyReadTimeout and the
// client's share of the receive budget, and handles it only while the bodies in
// flight stay within the port's budget.
type requestLimits struct {
	maxBody  int64
	inFlight *semaphore.Weighted // this port's
	process  *processBudget      // all ports'
	receive  *clientBudget
}

// processBudget bounds the bodies all ports of the process decode and handle at
// once: size is a quarter more than the largest port's budget, so that no port can
// take all of it.
type processBudget struct {
	size int64
	sem  *semaphore.Weighted
}

func newProcessBudget(portBudget int64) *processBudget {
	size := portBudget + portBudget/4
	return &processBudget{size: size, sem: semaphore.NewWeighted(size)}
}

// newRequestLimits returns the limits of one port; process is shared with the
// process's other ports (nil: a new one, for the first port).
func newRequestLimits(maxBody, maxInFlight int64, process *processBudget) (*requestLimits, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBodyBytes
	}
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlightBodyBytes
	}
	if maxInFlight < maxBody {
		return nil, fmt.Errorf("in-flight body budget %d is smaller than the body limit %d", maxInFlight, maxBody)
	}
	if process == nil {
		process = newProcessBudget(maxInFlight)
	}
	if maxInFlight >= process.size {
		return nil, fmt.Errorf("in-flight body budget %d leaves nothing of the process's %d to the other ports", maxInFlight, process.size)
	}
	perClient := max(receivePerClientBytes, 2*maxBody)
	return &requestLimits{maxBody: maxBody, inFlight: semaphore.NewWeighted(maxInFlight), process: process,
		receive: &clientBudget{total: max(receiveBudgetBytes, 2*perClient), perClient: perClient, held: map[string]int64{}}}, nil
}

// errClientOverShare is a body refused because its client held its share of the
// receive budget until the body deadline.
var errClientOverShare = errors.New("client over its share of the receive budget")

func (l *requestLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > l.maxBody {
			l.tooLarge(w)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
		client := connlimit.ClientOfAddress(r.RemoteAddr)
		body, charged, err := l.receiveBody(w, r, client)
		defer func() { l.receive.give(client, charged) }()
		if err != nil {
			var tooLarge *http.MaxBytesError
			switch {
			case errors.As(err, &tooLarge):
				l.tooLarge(w)
			case errors.Is(err, errClientOverShare):
				w.Header().Set("Connection", "close")
				http.Error(w, "too many request bytes in flight from this client", http.StatusServiceUnavailable)
			default:
				w.Header().Set("Connection", "close")
				http.Error(w, fmt.Sprintf("read request body: %v", err), http.StatusBadRequest)
			}
			return
		}
		_ = rc.SetReadDeadline(time.Time{})

		weight := min(int64(len(body))+minRequestWeight, l.maxBody)
		// This port's budget first, then the process's: a port waits for its own
		// requests before it queues for what all ports share.
		if err := l.inFlight.Acquire(r.Context(), weight); err != nil {
			http.Error(w, "request abandoned while waiting for the extension's in-flight request budget", http.StatusServiceUnavailable)
			return
		}
		defer l.inFlight.Release(weight)
		if err := l.process.sem.Acquire(r.Context(), weight); err != nil {
			http.Error(w, "request abandoned while waiting for the extension's in-flight request budget", http.StatusServiceUnavailable)
			return
		}
		defer l.process.sem.Release(weight)
		// The in-flight weight now accounts for the body.
		l.receive.give(client, charged)
		charged = 0
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// receiveBody reads r's body whole, charging what it holds (the buffer's capacity)
// to client's share of the receive budget as it arrives; charged is what the caller
// gives back.
func (l *requestLimits) receiveBody(w http.ResponseWriter, r *http.Request, client string) (body []byte, charged int64, err error) {
	ctx, cancel := context.WithTimeout(r.Context(), bodyReadTimeout)
	defer cancel()
	src := http.MaxBytesReader(w, r.Body, l.maxBody)
	chunk := make([]byte, receiveChunk)
	if !l.receive.take(ctx, client, receiveChunk) {
		return nil, 0, errClientOverShare
	}
	charged = receiveChunk
	for {
		n, err := src.Read(chunk)
		if n > 0 {
			body = append(body, chunk[:n]...)
			if need := int64(cap(body)+receiveChunk) - charged; need > 0 {
				if !l.receive.take(ctx, client, need) {
					return nil, charged, errClientOverShare
				}
				charged += need
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			return body, charged, nil
		case err != nil:
			return nil, charged, err
		}
	}
}

func (l *requestLimits) tooLarge(w http.ResponseWriter) {
	// Close the connection: the rest of the body is never read.
	w.Header().Set("Connection", "close")
	http.Error(w, fmt.Sprintf("request body exceeds the extension's limit of %d bytes", l.maxBody), http.StatusRequestEntityTooLarge)
}

// clientBudget is a byte budget of which one client may hold at most perClient. A
// take that does not fit waits (up to its context) for what others give back: a
// client over its share waits for its own requests, never for another client's.
type clientBudget struct {
	total, perClient int64

	mu      sync.Mutex
	used    int64
	held    map[string]int64
	changed chan struct{} // closed and replaced by every give
}

func (b *clientBudget) take(ctx context.Context, client string, n int64) bool {
	for {
		b.mu.Lock()
		if b.used+n <= b.total && b.held[client]+n <= b.perClient {
			b.used += n
			b.held[client] += n
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *clientBudget) give(client string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.held[client] -= n; b.held[client] <= 0 {
		delete(b.held, client)
	}
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}
