package simhost

import (
	"context"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

var _ etcd.QuorumReader = simEtcd{}

// Quorum: the simulated cluster's members (EtcdMembers) are healthy while the
// local member runs; a stopped local member cannot be read, as on a real node.
// A failing quorum is simulated with the gate fault of gate.EtcdQuorum.
func (e simEtcd) Quorum(ctx context.Context) (etcd.QuorumView, error) {
	st, err := e.Status(ctx)
	if err != nil {
		return etcd.QuorumView{}, fmt.Errorf("etcd status of the local member: %w", err)
	}
	v := etcd.QuorumView{Self: st.MemberID}
	for _, m := range st.Members {
		v.Members = append(v.Members, etcd.MemberHealth{ID: m.ID, Name: m.Name, Learner: m.Learner})
	}
	return v, nil
}
