package etcdhelper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// QuorumProbeTimeout bounds the probe of one member: a stopped member does not
// refuse a gRPC request, it lets it wait, so every probe of a stopped member
// costs this long (the members are probed in parallel).
const QuorumProbeTimeout = 3 * time.Second

var _ etcd.QuorumReader = &Direct{}

// Quorum implements QuorumReader: the member list as the local member knows it
// (serializable: a member cut off from the leader still answers),
// then every member probed on its own client URLs with the local member's client
// credentials, the way `etcdctl endpoint health --cluster` does: the member
// answers a status request, knows a leader and reports no error (an alarm), and a
// voting member serves a linearizable read. An error means the local member
// itself could not be read. A local learner sees only itself, by ID (etcd lists
// no members to a learner).
func (d *Direct) Quorum(ctx context.Context) (etcd.QuorumView, error) {
	c, err := d.client()
	if err != nil {
		return etcd.QuorumView{}, err
	}
	defer c.Close()
	rctx, cancel := d.requestContext(ctx)
	defer cancel()
	st, err := c.Status(rctx, d.Endpoints[0])
	if err != nil {
		return etcd.QuorumView{}, fmt.Errorf("etcd status of the local member %s: %w", d.Endpoints[0], err)
	}
	if st.IsLearner {
		// A learner answers no member list (not even a serializable one: "rpc not
		// supported for learner"); being one is reason enough to hold.
		return etcd.QuorumView{Self: st.Header.MemberId, Members: []etcd.MemberHealth{{ID: st.Header.MemberId, Learner: true}}}, nil
	}
	ml, err := c.MemberList(rctx, clientv3.WithSerializable())
	if err != nil {
		return etcd.QuorumView{}, fmt.Errorf("etcd member list: %w", err)
	}
	view := etcd.QuorumView{Self: st.Header.MemberId, Members: make([]etcd.MemberHealth, len(ml.Members))}
	var wg sync.WaitGroup
	for i, m := range ml.Members {
		view.Members[i] = etcd.MemberHealth{ID: m.ID, Name: m.Name, Learner: m.IsLearner}
		wg.Go(func() { view.Members[i].Problem = d.probe(ctx, m.ClientURLs, m.IsLearner) })
	}
	wg.Wait()
	slices.SortFunc(view.Members, func(a, b etcd.MemberHealth) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return view, nil
}

// probe returns what is wrong with the member serving clientURLs; "" when nothing.
func (d *Direct) probe(ctx context.Context, clientURLs []string, learner bool) string {
	if len(clientURLs) == 0 {
		return "it has not started (no client URLs: added but never joined)"
	}
	peer := *d
	peer.Endpoints = clientURLs
	c, err := peer.client()
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, QuorumProbeTimeout)
	defer cancel()
	st, err := c.Status(ctx, clientURLs[0])
	if err != nil {
		return fmt.Sprintf("no answer from %s within %s: %v", clientURLs[0], QuorumProbeTimeout, err)
	}
	if st.Leader == 0 {
		return "it knows no leader"
	}
	if len(st.Errors) > 0 {
		return "it reports " + strings.Join(st.Errors, "; ")
	}
	if learner {
		// A learner serves no linearizable read; its status is all it can show.
		return ""
	}
	// Permission denied still proves that a quorum answered the read.
	if _, err := c.Get(ctx, "health"); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Sprintf("a linearizable read through it failed: %v", err)
	}
	return ""
}
