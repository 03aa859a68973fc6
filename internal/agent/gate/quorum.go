package gate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// EtcdQuorum is the gate that the whole etcd cluster is healthy (every member
// answers healthy and this node's member is a voting member, not a learner).
const EtcdQuorum = "etcd-quorum"

// DefaultHoldTimeout is how long BeforeTouch holds a plan when the Checker sets
// no HoldTimeout: generous, since a member that restarts or a learner that
// catches up on a large database takes minutes, and a held plan costs nothing.
const DefaultHoldTimeout = 30 * time.Minute

// etcdAttemptTimeout bounds one poll of an etcd gate. The etcd client bounds its
// own requests (etcd.Local: each member's probe, then the helper as a whole, under
// a minute) and its error names the member that did not answer; the Checker's
// attempt bound, meant for API requests, is shorter than one member's probe and
// would end the poll with a bare deadline instead. This is a backstop above the
// client's own bound.
const etcdAttemptTimeout = 2 * time.Minute

// quorumGate is the EtcdQuorum gate of a control-plane plan.
func (c *Checker) quorumGate() Gate {
	return Gate{Name: EtcdQuorum, Check: c.Etcd.EtcdQuorum, AttemptTimeout: etcdAttemptTimeout}
}

// healthGate is the EtcdHealth gate of a control-plane plan: the local member.
func (c *Checker) healthGate() Gate {
	return Gate{Name: EtcdHealth, Check: c.Etcd.EtcdHealthy, AttemptTimeout: etcdAttemptTimeout}
}

// HoldClock counts, per plan, how long BeforeTouch has held it: from its first
// failed check until a check passes or the plan is refused (EndHold). With a
// Record the count outlives the agent process: an agent that restarts while a
// plan is held (a crash loop, a DaemonSet rollout) would otherwise start the
// count again each time and hold the cordoned node past the timeout.
type HoldClock struct {
	// Timeout is how long a plan may be held; zero means DefaultHoldTimeout.
	Timeout time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Record keeps the start of the current hold across restarts; nil keeps it in
	// memory only.
	Record HoldRecord

	mu     sync.Mutex
	since  map[string]time.Time
	loaded bool
}

// HoldRecord stores the start of one hold (the node holds one plan at a time).
// Its errors leave the count in memory: they shorten nothing, and an agent that
// cannot write its state directory fails its journal writes first.
type HoldRecord interface {
	// LoadHold returns the recorded hold; ok is false when there is none.
	LoadHold() (plan string, since time.Time, ok bool, err error)
	SaveHold(plan string, since time.Time) error
	ClearHold() error
}

// observe records one check of plan (err nil: it passed) and returns a
// *HoldTimeoutError once the plan has been held for the timeout, else err.
func (h *HoldClock) observe(plan string, err error) error {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.load(now)
	if err == nil {
		h.end(plan)
		return nil
	}
	since, ok := h.since[plan]
	if !ok {
		since = now
		h.since[plan] = now
		if h.Record != nil {
			_ = h.Record.SaveHold(plan, now)
		}
	}
	limit := h.Timeout
	if limit <= 0 {
		limit = DefaultHoldTimeout
	}
	if now.Sub(since) >= limit {
		// The count stays: a caller that could not give the plan up yet gets the
		// same answer on the next check.
		return &HoldTimeoutError{Held: limit, Err: err}
	}
	return err
}

// load reads the Record once per process. A start in the future (the clock was
// set back) counts from now, so the hold is never cut short.
func (h *HoldClock) load(now time.Time) {
	if h.since == nil {
		h.since = map[string]time.Time{}
	}
	if h.loaded || h.Record == nil {
		return
	}
	h.loaded = true
	plan, since, ok, err := h.Record.LoadHold()
	if err != nil || !ok {
		return
	}
	if since.After(now) {
		since = now
	}
	h.since[plan] = since
}

// EndHold ends plan's hold count: the caller refused the plan, so a retry of the
// same plan is held afresh rather than refused at once.
func (h *HoldClock) EndHold(plan string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.load(h.now())
	h.end(plan)
}

func (h *HoldClock) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *HoldClock) end(plan string) {
	if _, ok := h.since[plan]; !ok {
		return
	}
	delete(h.since, plan)
	if h.Record != nil {
		_ = h.Record.ClearHold()
	}
}

// HoldTimeoutError is BeforeTouch's answer once a plan has been held for the
// hold timeout: the caller gives the plan up (nothing on the node changed).
type HoldTimeoutError struct {
	Held time.Duration
	Err  error
}

func (e *HoldTimeoutError) Error() string {
	return fmt.Sprintf("the etcd cluster was not whole within %s: %v", e.Held, e.Err)
}

func (e *HoldTimeoutError) Unwrap() error { return e.Err }

// BeforeTouch checks, once, what must hold before the agent touches the node for
// p: on a control-plane node the etcd cluster is whole (EtcdQuorum), so that
// taking this member down for the update cannot cost the cluster its quorum (a
// three-member cluster with one member already down has none to spare); a node
// of an external etcd has no member to take down. Nil when nothing holds the
// plan back; the caller decides when to check again, and the error says which
// member. Once the same plan has been held for the Holds timeout, the error is a
// *HoldTimeoutError.
func (c *Checker) BeforeTouch(ctx context.Context, p *protocol.NodePlan) error {
	if !p.Kubernetes.LocalEtcd() {
		return nil
	}
	err := c.check(ctx, c.quorumGate())
	if c.Holds == nil || ctx.Err() != nil {
		return err
	}
	hash, hashErr := p.Hash()
	if hashErr != nil {
		return err
	}
	return c.Holds.observe(hash, err)
}

// EndHold ends the hold count of a plan the caller refused after a
// *HoldTimeoutError (see HoldClock.EndHold).
func (c *Checker) EndHold(p *protocol.NodePlan) {
	if c.Holds == nil {
		return
	}
	if hash, err := p.Hash(); err == nil {
		c.Holds.EndHold(hash)
	}
}
