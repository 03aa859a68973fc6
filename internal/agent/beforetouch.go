package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// BeforeToucher is a gate runner that also checks what must hold before a plan
// touches the node (gate.Checker: the etcd cluster is whole on a control-plane
// node).
type BeforeToucher interface {
	BeforeTouch(ctx context.Context, p *protocol.NodePlan) error
	// EndHold ends the hold count of a plan refused after its hold timeout, so
	// a retry of it is held afresh.
	EndHold(p *protocol.NodePlan)
}

// beforeTouchRetry is how soon a held plan is checked again.
const beforeTouchRetry = 5 * time.Second

// holdBeforeTouch reports whether the plan must wait before the agent claims and
// starts it. A held plan is reported Pending with the reason and the member that
// holds it, and checked again after beforeTouchRetry; it is not claimed, so the
// coordinator can still withdraw it, and nothing on the node has changed. A plan
// held for the runner's hold timeout (gate.HoldTimeoutError) is refused instead,
// journaled Failed with ReasonEtcdQuorumTimeout: the coordinator reports the
// update failed and a retry asks again.
func (a *Agent) holdBeforeTouch(ctx context.Context, hash string, plan *protocol.NodePlan) bool {
	bt, ok := a.Executor.Gates.(BeforeToucher)
	if !ok {
		return false
	}
	err := bt.BeforeTouch(ctx, plan)
	if err == nil || ctx.Err() != nil {
		return ctx.Err() != nil
	}
	var timedOut *gate.HoldTimeoutError
	if errors.As(err, &timedOut) {
		a.Log.Info("Refusing plan held before touching the node", "plan", hash, "reason", protocol.ReasonEtcdQuorumTimeout, "error", err.Error())
		if _, rerr := a.Executor.Reject(hash, protocol.ReasonEtcdQuorumTimeout,
			fmt.Sprintf("%v; nothing on the node changed; retry the update once the etcd cluster is whole", err)); rerr != nil {
			a.Log.Error(rerr, "Journaling the refused plan failed", "plan", hash)
			time.AfterFunc(beforeTouchRetry, a.trigger)
			return true
		}
		bt.EndHold(plan)
		return true
	}
	a.Log.Info("Holding plan before touching the node", "plan", hash, "reason", protocol.ReasonWaitingForEtcdQuorum, "error", err.Error())
	st := pending(hash, fmt.Sprintf("waiting for the etcd cluster before touching the node: %v", err))
	st.Reason = protocol.ReasonWaitingForEtcdQuorum
	a.Reporter.Report(st)
	time.AfterFunc(beforeTouchRetry, a.trigger)
	return true
}
