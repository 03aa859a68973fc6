package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// callTrace times the steps of one call for the "Call timing" log at V(2): where a
// call's wall time goes (mostly API round trips) when a rollout is slower than
// expected. Without V(2) no trace is kept and mark costs a context lookup.
type callTrace struct {
	mu    sync.Mutex
	t0    time.Time
	last  time.Time
	marks []string
}

type callTraceKey struct{}

// withCallTrace starts the trace of a call when the logger logs at V(2); nil otherwise.
func withCallTrace(ctx context.Context) (context.Context, *callTrace) {
	if !ctrl.LoggerFrom(ctx).V(2).Enabled() {
		return ctx, nil
	}
	now := time.Now()
	t := &callTrace{t0: now, last: now}
	return context.WithValue(ctx, callTraceKey{}, t), t
}

// mark records the time since the previous mark (or the call's start) under name.
func mark(ctx context.Context, name string) {
	t, _ := ctx.Value(callTraceKey{}).(*callTrace)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.marks = append(t.marks, fmt.Sprintf("%s=%dms", name, now.Sub(t.last).Milliseconds()))
	t.last = now
}

// log writes the trace; a nil trace logs nothing.
func (t *callTrace) log(ctx context.Context, out Outcome) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ctrl.LoggerFrom(ctx).V(2).Info("Call timing", "outcome", out.Kind, "totalMs", time.Since(t.t0).Milliseconds(), "steps", strings.Join(t.marks, " "))
}
