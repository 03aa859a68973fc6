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

	mu      sync.Mutex
	pending *protocol.NodeStatus
	// sent is the last status on the Node; a status that differs from it only in
	// UpdatedAt is not sent again (every patch is a Node event the agent reacts to).
	sent *protocol.NodeStatus
	kick chan struct{}
	once sync.Once
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
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
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
		if err := r.patch(ctx, *s); err != nil {
			r.Log.V(1).Info("Status report failed, will retry", "node", r.NodeName, "phase", s.Phase, "error", err.Error(), "retryIn", backoff)
			retry = time.After(backoff)
			backoff = min(backoff*2, maxBackoff)
			continue
		}
		backoff = 500 * time.Millisecond
		r.sent = s
		r.mu.Lock()
		if r.pending == s {
			r.pending = nil
		}
		r.mu.Unlock()
	}
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
