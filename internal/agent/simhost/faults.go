package simhost

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// faultName turns an action key ("rollback/restore-files") into a file suffix.
func faultName(key string) string { return strings.ReplaceAll(key, "/", "-") }

// BeforeAction implements executor.Faults: pause-before-<action> blocks until the
// file is removed (paused-at tells where), fail-action-<action> fails the action.
func (h *Host) BeforeAction(ctx context.Context, key string) error {
	pause := h.simPath("pause-before-" + faultName(key))
	if _, err := os.Stat(pause); err == nil {
		h.Log.Info("Simulated host paused before action", "action", key, "file", pause)
		_ = writeFile(h.simPath("paused-at"), []byte(key+"\n"))
		for {
			if _, err := os.Stat(pause); err != nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		_ = os.Remove(h.simPath("paused-at"))
	}
	if msg, ok := h.fault("fail-action-" + faultName(key)); ok {
		if msg == "" {
			msg = "injected failure"
		}
		return fmt.Errorf("simulated fault (fail-action-%s): %s", faultName(key), msg)
	}
	return nil
}

// GateFault implements gate.Faults: fail-gate fails the named gate, or every gate
// when it is empty.
func (h *Host) GateFault(name string) error {
	target, ok := h.fault("fail-gate")
	if !ok || (target != "" && target != name) {
		return nil
	}
	return fmt.Errorf("simulated fault (fail-gate): gate %s fails", name)
}

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
