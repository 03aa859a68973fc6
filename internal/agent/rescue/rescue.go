package rescue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Executor is the part of the agent's executor (executor.Executor) the rescue
// drives: the journal's state, and the rollback.
type Executor interface {
	Load() (state.State, *protocol.NodePlan, error)
	RollBack(ctx context.Context, reason, message string) (state.State, error)
}

// Rescuer acts on one node's journal while its caller holds the journal's lock.
// Every field is required but Log.
type Rescuer struct {
	Executor Executor
	// Probe asks the node's own API server whether it is ready; nil means
	// ready, an error says why not.
	Probe func(ctx context.Context) error
	// Deadline is how long the API server has to answer ready, from Run's
	// start, before the update is rolled back.
	Deadline time.Duration
	// Interval is the pause between two probes.
	Interval time.Duration
	Now      func() time.Time
	Log      logr.Logger
}

// Run decides from the journal (Decide), probing the API server as needed
// until the deadline, and rolls back when the verdict says so. It returns the
// verdict it ended on, Leave (nothing left to do: the caller removes the pod)
// or StandBy (the caller gives the journal to the agent and keeps the pod), and
// the journal's state then. It returns early, with an error, when ctx ends or
// the journal cannot be read or written; what it did is in the journal, and
// the next run carries on from there.
func (r *Rescuer) Run(ctx context.Context) (Verdict, state.State, error) {
	deadline := r.Now().Add(r.Deadline)
	seen, lastErr := NotProbed, errors.New("not probed")
	for {
		st, _, err := r.Executor.Load()
		if err != nil {
			return Leave, st, err
		}
		v := Decide(st, seen)
		switch v {
		case Leave, StandBy:
			return v, st, nil
		case RollBack:
			if st, err = r.Executor.RollBack(ctx, state.ReasonAPIServerNotBack, notBackMessage(r.Deadline, lastErr)); err != nil {
				return v, st, err
			}
			if !st.Phase.Terminal() {
				return v, st, fmt.Errorf("the rollback stopped in phase %s", st.Phase)
			}
			r.Log.Info("The update is over", "phase", st.Phase, "reason", st.Status().Reason)
			return Leave, st, nil
		case Probe:
			if seen == NotReady {
				select {
				case <-ctx.Done():
					return v, st, ctx.Err()
				case <-time.After(r.Interval):
				}
			}
			lastErr = r.Probe(ctx)
			switch {
			case lastErr == nil:
				seen = Ready
			case ctx.Err() != nil:
				return v, st, ctx.Err()
			case !r.Now().Before(deadline):
				r.Log.Info("The API server did not come back by the deadline: rolling back", "deadline", r.Deadline, "probe", lastErr.Error())
				seen = PastDeadline
			default:
				if seen == NotProbed {
					r.Log.Info("Waiting for the node's API server", "deadline", r.Deadline, "probe", lastErr.Error())
				}
				r.Log.V(1).Info("The node's API server is not ready", "probe", lastErr.Error())
				seen = NotReady
			}
		}
	}
}

// notBackMessage is the rollback's cause as the status reports it ("rolled
// back because <action> failed: <message>").
func notBackMessage(deadline time.Duration, probe error) string {
	return fmt.Sprintf("interrupted, and the node's own API server was not ready within %s of the rescue pod taking over (last probe: %v); the rescue pod rolled the node back", deadline, probe)
}
