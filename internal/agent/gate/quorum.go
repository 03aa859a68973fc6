package gate

import (
	"context"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// EtcdQuorum is the gate that the whole etcd cluster is healthy (every member
// answers healthy and this node's member is a voting member, not a learner).
const EtcdQuorum = "etcd-quorum"

// quorumGate is the EtcdQuorum gate of a control-plane plan.
func (c *Checker) quorumGate() Gate {
	return Gate{Name: EtcdQuorum, Check: c.Etcd.EtcdQuorum}
}

// BeforeTouch checks, once, what must hold before the agent touches the node for
// p: on a control-plane node the etcd cluster is whole (EtcdQuorum), so that
// taking this member down for the update cannot cost the cluster its quorum (a
// three-member cluster with one member already down has none to spare); a node
// of an external etcd has no member to take down. Nil when
// nothing holds the plan back; the caller decides when to check again, and the
// error says which member.
func (c *Checker) BeforeTouch(ctx context.Context, p *protocol.NodePlan) error {
	if !p.Kubernetes.LocalEtcd() {
		return nil
	}
	return c.check(ctx, c.quorumGate())
}
