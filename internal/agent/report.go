package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Reporter publishes the latest status on the Node's annotations in the
// background: Report never blocks, a newer status replaces one not yet sent, and
// a failed patch is retried with backoff until the API server answers.
//
// Progress within a phase is coalesced: a status in the same non-terminal phase
// of the same plan as the last one sent (a step or a gate further) is sent no
// sooner than Coalesce after that one, and a newer status replaces it meanwhile.
// Every Node patch is an event for every watcher of Nodes (the coordinator,
// Cluster API's Machine controller, which reconciles the Machine on each, and the
// agent itself), and a files-only plan used to report ten statuses in 150 ms. A
// new phase (applying, rebooting, verifying, committed, failed, rolled back) is
// sent at once: that is what the coordinator decides on; the step and the gate
// only inform.
//
// The first status of a plan waits Settle for a newer one, unless it ends the
// plan or announces a reboot: a plan that is over within it (a files-only plan
// takes 40-130 ms) costs one Node patch, its end, instead of one per phase
// (applying, verifying, committed), each a Machine reconcile in Cluster API in
// the middle of a rollout (docs/performance.md, "What the figures mean"). Nothing
// waits on the first status but the coordinator's pick-up deadline, minutes long. A
// reboot is never held: the Node shows it before the node goes away.
type Reporter struct {
	Client   kubernetes.Interface
	NodeName string
	Log      logr.Logger
	// MaxBackoff caps the retry interval.
	MaxBackoff time.Duration
	// AttemptTimeout bounds one status patch, so that a request stuck on an API
	// server that restarts (it accepts connections before it serves) is retried
	// instead of holding every later status; zero means 10 s.
	AttemptTimeout time.Duration
	// Coalesce is how long progress within a phase waits for a newer status
	// (above); zero means 500 ms, negative sends every status at once.
	Coalesce time.Duration
	// Settle is how long the first status of a plan waits for a newer one
	// (above); zero means 250 ms, negative sends it at once.
	Settle time.Duration

	mu      sync.Mutex
	pending *protocol.NodeStatus
	// sent is the last status on the Node; a status that differs from it only in
	// UpdatedAt is not sent again (every patch is a Node event the agent reacts to).
	sent *protocol.NodeStatus
	// sentAt is when sent was sent (Coalesce).
	sentAt time.Time
	// firstPlan and firstAt are the plan of the statuses reported last and when
	// its first status was reported (Settle); guarded by mu.
	firstPlan string
	firstAt   time.Time
	kick      chan struct{}
	once      sync.Once
	// gates names the running or failed health gate in statuses (gatestatus.go).
	gates gateStamp
}

func (r *Reporter) init() { r.once.Do(func() { r.kick = make(chan struct{}, 1) }) }

// Report implements executor.Reporter.
func (r *Reporter) Report(s protocol.NodeStatus) {
	r.gates.stamp(&s)
	// The status is built from errors, and the Node annotation is readable by
	// every node: whatever secret a path forgot to redact at its source stops here.
	s.Message = backend.RedactKnownSecrets(s.Message)
	s.Reason = backend.RedactKnownSecrets(s.Reason)
	r.init()
	r.mu.Lock()
	r.pending = &s
	if s.PlanHash != r.firstPlan || r.firstAt.IsZero() {
		r.firstPlan, r.firstAt = s.PlanHash, time.Now()
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run sends statuses until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	r.init()
	backoff := 500 * time.Millisecond
	maxBackoff := r.MaxBackoff
	if maxBackoff == 0 {
		maxBackoff = 10 * time.Second
	}
	var retry, hold <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
		case <-hold:
			hold = nil
		}
		retry = nil
		r.mu.Lock()
		s := r.pending
		r.mu.Unlock()
		if s == nil {
			continue
		}
		if r.sent != nil && sameStatus(*r.sent, *s) {
			r.mu.Lock()
			if r.pending == s {
				r.pending = nil
			}
			r.mu.Unlock()
			continue
		}
		if wait := r.holdFor(*s, time.Now()); wait > 0 {
			if hold == nil {
				hold = time.After(wait)
			}
			continue
		}
		hold = nil
		if err := r.patch(ctx, *s); err != nil {
			r.Log.V(1).Info("Status report failed, will retry", "node", r.NodeName, "phase", s.Phase, "error", err.Error(), "retryIn", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff = 500 * time.Millisecond
		r.sent, r.sentAt = s, time.Now()
		r.mu.Lock()
		if r.pending == s {
			r.pending = nil
		}
		r.mu.Unlock()
	}
}

// holdFor is how long s waits before it is sent: the first status of a plan
// waits out Settle from when it was reported, progress within the phase of the
// status sent last waits out Coalesce from that one; the end of a plan, a reboot
// and anything else, nothing.
func (r *Reporter) holdFor(s protocol.NodeStatus, now time.Time) time.Duration {
	if s.Phase.Terminal() || s.Phase == protocol.PhaseRebooting {
		return 0
	}
	if r.sent == nil || r.sent.PlanHash != s.PlanHash {
		settle := r.Settle
		if settle == 0 {
			settle = 250 * time.Millisecond
		}
		if settle < 0 {
			return 0
		}
		r.mu.Lock()
		first := r.firstAt
		r.mu.Unlock()
		return first.Add(settle).Sub(now)
	}
	window := r.Coalesce
	if window == 0 {
		window = 500 * time.Millisecond
	}
	if window < 0 || r.sent.Phase != s.Phase {
		return 0
	}
	return r.sentAt.Add(window).Sub(now)
}

func (r *Reporter) patch(ctx context.Context, s protocol.NodeStatus) error {
	value, err := protocol.EncodeStatus(s)
	if err != nil {
		return err
	}
	ann := map[string]any{
		inplacev1.StateAnnotation:  string(s.Phase),
		inplacev1.StatusAnnotation: value,
	}
	if s.Phase == protocol.PhaseCommitted {
		ann[inplacev1.CurrentPlanAnnotation] = s.PlanHash
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return fmt.Errorf("encode status patch: %w", err)
	}
	attempt := r.AttemptTimeout
	if attempt <= 0 {
		attempt = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "capi-inplace-agent"}); err != nil {
		return fmt.Errorf("patch node %s: %w", r.NodeName, err)
	}
	r.Log.V(1).Info("Reported status", "node", r.NodeName, "plan", s.PlanHash, "phase", s.Phase, "step", s.Step, "steps", s.Steps)
	return nil
}

func sameStatus(a, b protocol.NodeStatus) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return a == b
}
