package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestThreeMemberControlPlaneRollbackKeepsTheCluster: one control-plane node of a
// real three-member etcd cluster fails its gates after kubeadm upgrade and rolls
// back through the agent's own path. Its member is not restored from the
// snapshot: the cluster keeps one cluster ID, three members and quorum, and the
// rolled-back node's member still holds the writes made after the snapshot.
func TestThreeMemberControlPlaneRollbackKeepsTheCluster(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := etcdtest.Cluster(t, 3)
	var urls []string
	for _, m := range ms {
		urls = append(urls, m.ClientURL)
	}
	local := &etcd.Local{Endpoints: []string{ms[0].ClientURL}, Helper: etcdtest.Helper(t), RequestTimeout: 2 * time.Second}
	g.Eventually(func() error { return local.Healthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	c, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	before, err := local.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	f := newFixture(t, failingGate)
	f.write(t, kube.EtcdManifest, string(etcdtest.Manifest(ms[0], kube.EtcdDataDir)))
	f.kube.Etcd = local
	// Writes the rest of the cluster accepts while this node is being updated.
	_, err = c.Put(ctx, "/registry/during", "update")
	g.Expect(err).NotTo(HaveOccurred())

	st, err := f.x.Start(ctx, cpPlan())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.EtcdMembers).To(Equal(3))
	runs, _ := f.x.Runs()
	g.Expect(runs).To(HaveKeyWithValue("etcd-snapshot", 1))
	g.Expect(runs).To(HaveKeyWithValue("rollback/restore-files", 1))
	g.Expect(runs).NotTo(HaveKey("rollback/" + string(state.ActRestoreEtcd)))
	dirs := f.attemptDirs(t)
	g.Expect(dirs).To(HaveLen(1))
	_, err = os.Stat(filepath.Join(f.root, kube.AttemptsDir, dirs[0], "etcd-replaced"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no data directory was swapped")

	_, err = c.Put(ctx, "/registry/after", "rollback")
	g.Expect(err).NotTo(HaveOccurred(), "the cluster has quorum")
	for _, m := range ms {
		l := &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t)}
		s, err := l.Status(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.ClusterID).To(Equal(before.ClusterID), m.Name)
		g.Expect(s.Members).To(HaveLen(3), m.Name)
		one, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 5 * time.Second})
		g.Expect(err).NotTo(HaveOccurred())
		r, err := one.Get(ctx, "/registry/during")
		_ = one.Close()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Kvs).To(HaveLen(1), m.Name+" has the write made during the update")
	}
}
