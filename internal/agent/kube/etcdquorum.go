package kube

import (
	"context"
	"errors"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// EtcdQuorum checks the local member's whole cluster: every member healthy and
// the local member a voting member (etcd.CheckQuorum). The member reads the
// cluster (etcd.QuorumReader), in this process or in the etcd helper's.
func (h *Host) EtcdQuorum(ctx context.Context) error {
	m, err := h.etcdMember()
	if err != nil {
		return err
	}
	q, ok := m.(etcd.QuorumReader)
	if !ok {
		return errors.New("the node's etcd member cannot report the health of its cluster")
	}
	v, err := q.Quorum(ctx)
	if err != nil {
		return fmt.Errorf("etcd cluster health: %w", err)
	}
	return etcd.CheckQuorum(v)
}
