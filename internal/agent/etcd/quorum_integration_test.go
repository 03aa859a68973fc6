package etcd_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
)

func quorumOf(ctx context.Context, l *etcd.Local) error {
	v, err := l.Quorum(ctx)
	if err != nil {
		return err
	}
	return etcd.CheckQuorum(v)
}

// TestQuorumAgainstRealMembers: three real etcd processes on loopback. All up,
// the check passes; one stopped, it holds and names that member (the other two
// still have quorum: the gate asks for the whole cluster); started again, it
// passes. A fourth member added as a learner holds the check on that member
// until it is promoted to a voting member.
func TestQuorumAgainstRealMembers(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := etcdtest.Cluster(t, 3)
	local := &etcd.Local{Endpoints: []string{ms[0].ClientURL}, Helper: etcdtest.Helper(t)}
	g.Eventually(func() error { return quorumOf(ctx, local) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	ms[2].Stop()
	g.Expect(local.Healthy(ctx)).To(Succeed(), "two of three members keep the quorum: the local health gate alone passes")
	err := quorumOf(ctx, local)
	var qe *etcd.QuorumError
	g.Expect(errors.As(err, &qe)).To(BeTrue(), "want a QuorumError, got %v", err)
	g.Expect(qe.Reason).To(Equal(etcd.QuorumMemberUnhealthy))
	g.Expect(qe.Member).To(Equal(ms[2].Name))
	g.Expect(err.Error()).To(ContainSubstring("etcd member m2 is not healthy"))

	ms[2].Start(t)
	g.Eventually(func() error { return quorumOf(ctx, local) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// A learner: added to the cluster, then started with the cluster's members.
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[0].ClientURL}, DialTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	learner := etcdtest.NewMember(t, t.TempDir(), "m3")
	var added *clientv3.MemberAddResponse
	// etcd refuses a reconfiguration until the restarted member has been active a while.
	g.Eventually(func() (err error) {
		added, err = c.MemberAddAsLearner(ctx, []string{learner.PeerURL})
		return err
	}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
	learner.InitialCluster = ms[0].InitialCluster + "," + learner.Name + "=" + learner.PeerURL
	learner.Extra = []string{"--initial-cluster-state=existing"}

	// Added but not started: the other members see a member that never joined.
	err = quorumOf(ctx, local)
	g.Expect(errors.As(err, &qe)).To(BeTrue(), "want a QuorumError, got %v", err)
	g.Expect(qe.Reason).To(Equal(etcd.QuorumMemberUnhealthy))

	learner.Start(t)
	self := &etcd.Local{Endpoints: []string{learner.ClientURL}, Helper: etcdtest.Helper(t)}
	g.Eventually(func() error {
		err := quorumOf(ctx, self)
		if errors.As(err, &qe) && qe.Reason == etcd.QuorumSelfLearner {
			return nil
		}
		return errors.New("not (yet) held as a learner: " + errString(err))
	}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(qe.Member).To(Equal(strconv.FormatUint(added.Member.ID, 16)), "etcd lists no member names to a learner: it is named by ID")
	g.Expect(quorumOf(ctx, local)).To(Succeed(), "from a voting member a healthy learner is no problem")

	g.Eventually(func() error {
		_, err := c.MemberPromote(ctx, added.Member.ID)
		return err
	}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
	g.Eventually(func() error { return quorumOf(ctx, self) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
}

func errString(err error) string {
	if err == nil {
		return "passed"
	}
	return strings.TrimSpace(err.Error())
}
