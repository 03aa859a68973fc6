package extension

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
	"sigs.k8s.io/cluster-api/exp/runtime/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Request limits of the hook server. Every hook and the hold webhook use failurePolicy
// Fail, so one request that takes the extension down (its memory limit is 256Mi)
// blocks every in-place rollout and every KubeadmControlPlane update; these bound what
// any request, and all requests together, may cost.
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
	// DefaultMaxInFlightBodyBytes bounds the bodies being decoded and handled at
	// once, weighted by size: one maximum-size request at a time, or over a hundred
	// real ones (each weighs its body plus minRequestWeight). Later requests wait for
	// their share (up to their deadline) instead of failing.
	DefaultMaxInFlightBodyBytes = DefaultMaxRequestBodyBytes
	// bodyReadTimeout stops a slow sender from holding its share of the in-flight
	// budget; CAPI's hook timeouts are 10 s (30 s for UpdateMachine).
	bodyReadTimeout = 10 * time.Second
	// minRequestWeight is what a request of any size costs beyond its body (headers,
	// the decoded request and response).
	minRequestWeight = 4 << 10
)

// requestLimits wraps every handler of a webhook.Server: it refuses bodies over
// maxBody with 413 before reading them whole, and admits a request only while the
// bodies in flight stay within the budget.
type requestLimits struct {
	webhook.Server
	maxBody  int64
	inFlight *semaphore.Weighted
}

func newRequestLimits(srv webhook.Server, maxBody, maxInFlight int64) (*requestLimits, error) {
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBodyBytes
	}
	if maxInFlight <= 0 {
		maxInFlight = DefaultMaxInFlightBodyBytes
	}
	if maxInFlight < maxBody {
		return nil, fmt.Errorf("in-flight body budget %d is smaller than the body limit %d", maxInFlight, maxBody)
	}
	return &requestLimits{Server: srv, maxBody: maxBody, inFlight: semaphore.NewWeighted(maxInFlight)}, nil
}

// Register wraps hook in the limits: the hook handlers (CAPI's runtime server
// registers them when it starts) and anything else served on this server, such as
// the hold webhook.
func (l *requestLimits) Register(path string, hook http.Handler) {
	l.Server.Register(path, l.wrap(hook))
}

func (l *requestLimits) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > l.maxBody {
			l.tooLarge(w)
			return
		}
		// A body of unknown length (chunked) may be as large as the limit.
		weight := r.ContentLength
		if weight < 0 {
			weight = l.maxBody
		}
		weight = max(weight, 0) + minRequestWeight
		weight = min(weight, l.maxBody)
		if err := l.inFlight.Acquire(r.Context(), weight); err != nil {
			http.Error(w, "request abandoned while waiting for the extension's in-flight request budget", http.StatusServiceUnavailable)
			return
		}
		defer l.inFlight.Release(weight)

		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				l.tooLarge(w)
				return
			}
			http.Error(w, fmt.Sprintf("read request body: %v", err), http.StatusBadRequest)
			return
		}
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func (l *requestLimits) tooLarge(w http.ResponseWriter) {
	// Close the connection: the rest of the body is never read.
	w.Header().Set("Connection", "close")
	http.Error(w, fmt.Sprintf("request body exceeds the extension's limit of %d bytes", l.maxBody), http.StatusRequestEntityTooLarge)
}

// WithLimitsOf returns other with the request limits of hookServer (built by
// NewServer), sharing its in-flight budget: a second HTTPS server of the same
// process, such as one serving only the hold admission webhook, must not double what
// requests may cost together. Handlers registered through the result are bounded;
// ones registered on other directly are not.
func WithLimitsOf(hookServer *server.Server, other webhook.Server) (webhook.Server, error) {
	if hookServer == nil || other == nil {
		return nil, errors.New("request limits need the hook server and the other server")
	}
	l, ok := hookServer.Server.(*requestLimits)
	if !ok {
		return nil, errors.New("the hook server was not built by NewServer: it has no request limits to share")
	}
	return &requestLimits{Server: other, maxBody: l.maxBody, inFlight: l.inFlight}, nil
}
