package simhost

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"time"
)

// faultName turns an action key ("rollback/restore-files") into a file suffix.
func faultName(key string) string { return strings.ReplaceAll(key, "/", "-") }

func (h *Host) fault(name string) (string, bool) {
	b, err := os.ReadFile(h.simPath(name))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// APIDown reports whether a simulated API server outage is in progress.
func (h *Host) APIDown() bool {
	s := h.readTrim(h.simPath("api-down-until"))
	if s == "" {
		return false
	}
	until, err := time.Parse(time.RFC3339Nano, s)
	return err == nil && h.now().Before(until)
}

// ErrAPIDown is returned for requests during a simulated outage.
var ErrAPIDown = errors.New("simulated API server outage: connection refused")

// WrapTransport makes every request fail during a simulated API server outage;
// use it as rest.Config.WrapTransport of the agent's clients.
func (h *Host) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{h: h, next: rt}
}

type roundTripper struct {
	h    *Host
	next http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.h.APIDown() {
		return nil, ErrAPIDown
	}
	return r.next.RoundTrip(req)
}
