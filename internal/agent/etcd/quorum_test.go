package etcd_test

import (
	"errors"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// TestCheckQuorum: the pure decision over a cluster view.
func TestCheckQuorum(t *testing.T) {
	healthy := func(id uint64, name string) etcd.MemberHealth { return etcd.MemberHealth{ID: id, Name: name} }
	down := func(id uint64, name, why string) etcd.MemberHealth {
		return etcd.MemberHealth{ID: id, Name: name, Problem: why}
	}
	tests := []struct {
		name   string
		view   etcd.QuorumView
		reason etcd.QuorumReason // "" passes
		member string
		msg    string
	}{
		{name: "one member, healthy", view: etcd.QuorumView{Self: 1, Members: []etcd.MemberHealth{healthy(1, "cp-0")}}},
		{name: "three healthy", view: etcd.QuorumView{Self: 2, Members: []etcd.MemberHealth{healthy(1, "a"), healthy(2, "b"), healthy(3, "c")}}},
		{name: "one of three down: quorum kept, gate holds", reason: etcd.QuorumMemberUnhealthy, member: "c",
			view: etcd.QuorumView{Self: 1, Members: []etcd.MemberHealth{healthy(1, "a"), healthy(2, "b"), down(3, "c", "no answer")}},
			msg:  "etcd member c is not healthy: no answer"},
		{name: "two of three down: counted", reason: etcd.QuorumMemberUnhealthy, member: "b",
			view: etcd.QuorumView{Self: 1, Members: []etcd.MemberHealth{healthy(1, "a"), down(2, "b", "x"), down(3, "c", "y")}},
			msg:  "etcd member b is not healthy: x (2 of 3 members are not healthy)"},
		{name: "the local member's own problem is named first", reason: etcd.QuorumMemberUnhealthy, member: "c",
			view: etcd.QuorumView{Self: 3, Members: []etcd.MemberHealth{healthy(1, "a"), down(2, "b", "x"), down(3, "c", "it knows no leader")}}},
		{name: "self a learner", reason: etcd.QuorumSelfLearner, member: "d",
			view: etcd.QuorumView{Self: 4, Members: []etcd.MemberHealth{healthy(1, "a"), healthy(2, "b"), healthy(3, "c"), {ID: 4, Name: "d", Learner: true}}},
			msg:  "etcd member d (this node) is a learner, not yet a voting member"},
		{name: "another member a healthy learner passes", view: etcd.QuorumView{Self: 1, Members: []etcd.MemberHealth{healthy(1, "a"), {ID: 4, Name: "d", Learner: true}}}},
		{name: "unhealthy beats learner", reason: etcd.QuorumMemberUnhealthy, member: "a",
			view: etcd.QuorumView{Self: 4, Members: []etcd.MemberHealth{down(1, "a", "x"), {ID: 4, Name: "d", Learner: true}}}},
		{name: "unnamed member (added, never started) by ID", reason: etcd.QuorumMemberUnhealthy, member: "ff",
			view: etcd.QuorumView{Self: 1, Members: []etcd.MemberHealth{healthy(1, "a"), down(255, "", "it has not started")}}},
		{name: "self missing", reason: etcd.QuorumSelfMissing, member: "9",
			view: etcd.QuorumView{Self: 9, Members: []etcd.MemberHealth{healthy(1, "a")}}},
		{name: "no members", reason: etcd.QuorumNoMembers, view: etcd.QuorumView{Self: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := etcd.CheckQuorum(tt.view)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("want pass, got %v", err)
				}
				return
			}
			var qe *etcd.QuorumError
			if !errors.As(err, &qe) {
				t.Fatalf("want a QuorumError %s, got %v", tt.reason, err)
			}
			if qe.Reason != tt.reason || qe.Member != tt.member {
				t.Fatalf("got reason %s member %q, want %s %q (%v)", qe.Reason, qe.Member, tt.reason, tt.member, err)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Fatalf("message %q, want %q", err.Error(), tt.msg)
			}
		})
	}
}
