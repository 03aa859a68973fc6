package coordinator

import (
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestDecideShowsTheEtcdQuorumHold: a plan the agent holds before touching a
// control-plane node (the etcd cluster is not whole) is waited for, and the hook
// message names the member, as the agent said it.
func TestDecideShowsTheEtcdQuorumHold(t *testing.T) {
	st := &protocol.NodeStatus{PlanHash: "abc", Phase: protocol.PhasePending, Reason: protocol.ReasonWaitingForEtcdQuorum,
		Message: "waiting for the etcd cluster before touching the node: etcd member cp-2 is not healthy: no answer"}
	d := Decide(Observation{Node: "cp-1", PlanHash: "abc", Published: "abc", Started: true, Status: st})
	if d.Action != ActAwaitAgent {
		t.Fatalf("action %v, want ActAwaitAgent", d.Action)
	}
	want := "step 5/6: waiting for the agent on node cp-1 to apply plan abc: Pending: waiting for the etcd cluster before touching the node: etcd member cp-2 is not healthy: no answer"
	if d.Message != want {
		t.Fatalf("message\n%q, want\n%q", d.Message, want)
	}
	st.Reason, st.Message = "", "picked up plan abc"
	if d := Decide(Observation{Node: "cp-1", PlanHash: "abc", Published: "abc", Started: true, Status: st}); d.Message != "step 5/6: waiting for the agent on node cp-1 to apply plan abc: Pending" {
		t.Fatalf("other pending messages stay as they were: %q", d.Message)
	}
}
