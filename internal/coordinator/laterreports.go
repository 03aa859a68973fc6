package coordinator

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
)

// A successful update's report (the Machine's InPlaceUpdate condition set to
// Succeeded and its Event) is written after the call has answered done: Cluster
// API's next step for the Machine, and for the next Machine of a rollout, waits on
// the answer, never on the condition, and the write is a round trip to a
// management API server that is busiest exactly during a rollout
// (docs/performance.md, "What the figures mean": ~40 ms of a ~290 ms call at 3 + 2,
// ~115 of ~700 at 3 + 30). Nothing reads the Succeeded condition back to decide
// anything: it is for operators and `capi-inplace status`. A failure's condition is
// different: it is written before the answer, so a Failure is never visible to
// Cluster API without its explanation on the Machine.
//
// The write is retried with backoff for up to laterReportTimeout and is lost only
// when the process dies within that time, in which case the Machine keeps the
// condition of its previous update (or none); the answer, the node and every
// decision are unaffected. At most maxLaterReports writes are pending at once;
// beyond that a call writes its report before answering, as for a failure, so a
// management API server that does not answer cannot pile up goroutines.
const (
	laterReportTimeout = 30 * time.Second
	maxLaterReports    = 64
)

// laterReportBackoff spaces the attempts of a pending write: conflicts are retried
// at once by setMachineCondition, this covers an API server that failed the write.
var laterReportBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 5 * time.Second}

// laterReports tracks the report writes still pending after their calls answered.
type laterReports struct {
	slots   chan struct{}
	pending sync.WaitGroup
}

func newLaterReports() *laterReports {
	return &laterReports{slots: make(chan struct{}, maxLaterReports)}
}

// reportLater writes the report of decision d for the update in s after the call
// has answered; it writes it at once when maxLaterReports are pending already. s
// is not used after reportLater returns: the write works on its own copy.
func (c *Coordinator) reportLater(ctx context.Context, s *scope, d Decision) {
	select {
	case c.later.slots <- struct{}{}:
	default:
		c.report(ctx, s, d)
		return
	}
	own := &scope{machine: s.machine, stored: s.stored.DeepCopy()}
	// The call's deadline ends with its answer; the write keeps its logger only.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), laterReportTimeout)
	c.later.pending.Go(func() {
		defer func() { <-c.later.slots }()
		defer cancel()
		err := retry.OnError(laterReportBackoff, func(error) bool { return bg.Err() == nil }, func() error {
			return c.writeReport(bg, own, d)
		})
		if err != nil {
			ctrl.LoggerFrom(bg).Error(err, "Could not record the in-place update's success on the Machine; it keeps its previous InPlaceUpdate condition")
		}
	})
}

// WaitForReports waits until the report writes pending after their calls answered
// are over, or ctx ends.
func (c *Coordinator) WaitForReports(ctx context.Context) error {
	over := make(chan struct{})
	go func() {
		c.later.pending.Wait()
		close(over)
	}()
	select {
	case <-over:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start implements controller-runtime's manager.Runnable: it returns once the
// manager stops and the pending report writes are over (within the manager's
// graceful shutdown timeout), so that a clean shutdown loses none of them.
func (c *Coordinator) Start(ctx context.Context) error {
	<-ctx.Done()
	// The manager bounds the whole shutdown; this bounds ours within it.
	bounded, cancel := context.WithTimeout(context.WithoutCancel(ctx), laterReportTimeout)
	defer cancel()
	if err := c.WaitForReports(bounded); err != nil {
		ctrl.LoggerFrom(ctx).Info("Stopped with in-place update reports still unwritten", "error", err.Error())
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica
// answers hooks, so every replica has reports to finish.
func (c *Coordinator) NeedLeaderElection() bool { return false }
