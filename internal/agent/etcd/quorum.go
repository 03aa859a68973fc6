package etcd

import (
	"context"
	"fmt"
	"strconv"
)

// MemberHealth is one member of the cluster as a quorum probe saw it.
type MemberHealth struct {
	ID   uint64 `json:"id"`
	Name string `json:"name,omitempty"`
	// Learner members replicate but do not vote.
	Learner bool `json:"learner,omitempty"`
	// Problem says why the member is not healthy; empty when it answered its
	// probe healthy. A string, not an error, so that a view read by another
	// process (a helper binary printing it as JSON) keeps it.
	Problem string `json:"problem,omitempty"`
}

// QuorumView is the whole cluster as seen from the local member.
type QuorumView struct {
	// Self is the local member's ID.
	Self    uint64         `json:"self"`
	Members []MemberHealth `json:"members"`
}

// QuorumReader reads the health of every member of the local member's cluster.
// Local implements it; an implementation in another process only has to hand
// back the same view.
type QuorumReader interface {
	Quorum(ctx context.Context) (QuorumView, error)
}

// QuorumReason is why a quorum check did not pass; callers decide on it, never on
// the message.
type QuorumReason string

const (
	// QuorumMemberUnhealthy: some member did not answer its probe healthy.
	QuorumMemberUnhealthy QuorumReason = "MemberUnhealthy"
	// QuorumSelfLearner: the local member is still a learner (not voting yet).
	QuorumSelfLearner QuorumReason = "SelfLearner"
	// QuorumSelfMissing: the local member is not in the member list.
	QuorumSelfMissing QuorumReason = "SelfMissing"
	// QuorumNoMembers: the member list is empty.
	QuorumNoMembers QuorumReason = "NoMembers"
)

// QuorumError is a quorum check that did not pass, naming the member.
type QuorumError struct {
	Reason QuorumReason
	// Member names the member concerned (its name, or its ID in hex when it has
	// none yet: a member added but never started).
	Member string
	// Problem is the member's probe result, for MemberUnhealthy.
	Problem string
	// Unhealthy counts the members that are not healthy, of Total.
	Unhealthy, Total int
}

func (e *QuorumError) Error() string {
	switch e.Reason {
	case QuorumMemberUnhealthy:
		s := fmt.Sprintf("etcd member %s is not healthy: %s", e.Member, e.Problem)
		if e.Unhealthy > 1 {
			s += fmt.Sprintf(" (%d of %d members are not healthy)", e.Unhealthy, e.Total)
		}
		return s
	case QuorumSelfLearner:
		return fmt.Sprintf("etcd member %s (this node) is a learner, not yet a voting member", e.Member)
	case QuorumSelfMissing:
		return fmt.Sprintf("etcd member %s (this node) is not in the cluster's member list", e.Member)
	default:
		return "the etcd member list is empty"
	}
}

// CheckQuorum decides whether the cluster is whole: every member healthy and the
// local member a voting member. A cluster that merely keeps its quorum is not
// enough: taking a control-plane node down while another member is already down
// leaves a three-member cluster without one. The first problem in member order
// (the view's, which Local sorts by name) is named; a problem of the local member
// itself comes first.
func CheckQuorum(v QuorumView) error {
	if len(v.Members) == 0 {
		return &QuorumError{Reason: QuorumNoMembers}
	}
	var self *MemberHealth
	for i := range v.Members {
		if v.Members[i].ID == v.Self {
			self = &v.Members[i]
		}
	}
	if self == nil {
		return &QuorumError{Reason: QuorumSelfMissing, Member: strconv.FormatUint(v.Self, 16), Total: len(v.Members)}
	}
	var first *MemberHealth
	unhealthy := 0
	for i := range v.Members {
		m := &v.Members[i]
		if m.Problem == "" {
			continue
		}
		unhealthy++
		if first == nil || m == self {
			first = m
		}
	}
	if first != nil {
		return &QuorumError{Reason: QuorumMemberUnhealthy, Member: first.label(), Problem: first.Problem, Unhealthy: unhealthy, Total: len(v.Members)}
	}
	if self.Learner {
		return &QuorumError{Reason: QuorumSelfLearner, Member: self.label(), Total: len(v.Members)}
	}
	return nil
}

func (m MemberHealth) label() string {
	if m.Name != "" {
		return m.Name
	}
	return strconv.FormatUint(m.ID, 16)
}
