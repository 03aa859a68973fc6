package etcd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
)

// TestLocalAgainstARealMember: status, health, snapshot, the data directory lock
// and an offline restore, against a real etcd process.
func TestLocalAgainstARealMember(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := etcdtest.NewMember(t, t.TempDir(), "solo")
	m.Start(t)
	l := &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t)}
	g.Eventually(func() error { return l.Healthy(ctx) }, 20*time.Second, 200*time.Millisecond).Should(Succeed())

	c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	_, err = c.Put(ctx, "/k", "before")
	g.Expect(err).NotTo(HaveOccurred())

	st, err := l.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Members).To(HaveLen(1))
	g.Expect(st.Members[0].Name).To(Equal("solo"))
	g.Expect(st.DBSize).To(BeNumerically(">", 0))

	var snap bytes.Buffer
	g.Expect(l.Snapshot(ctx, &snap)).To(Succeed())
	g.Expect(int64(snap.Len())).To(BeNumerically(">=", st.DBSize-4096))
	path := filepath.Join(t.TempDir(), "snap.db")
	g.Expect(os.WriteFile(path, snap.Bytes(), 0o600)).To(Succeed())

	stopped, err := l.Stopped(ctx, m.DataDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeFalse(), "a running etcd holds its database lock")
	m.Stop()
	stopped, err = l.Stopped(ctx, m.DataDir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(stopped).To(BeTrue())

	out := filepath.Join(t.TempDir(), "restored")
	g.Expect(l.Restore(ctx, etcd.RestoreConfig{SnapshotPath: path, DataDir: out, Name: "solo", PeerURLs: []string{m.PeerURL},
		InitialCluster: m.InitialCluster, InitialClusterToken: etcd.DefaultInitialClusterToken})).To(Succeed())
	g.Expect(filepath.Join(out, "member", "snap", "db")).To(BeARegularFile())
	g.Expect(l.Restore(ctx, etcd.RestoreConfig{SnapshotPath: path, DataDir: out, Name: "solo", PeerURLs: []string{m.PeerURL},
		InitialCluster: m.InitialCluster})).To(MatchError(ContainSubstring("already exists")))

	g.Expect(l.Healthy(ctx)).NotTo(Succeed(), "the member is stopped")
}

// TestKubeadmLocalOverTLS: the agent's kubeadm configuration (client certificate
// files at kubeadm's paths under the host root) against a real member that
// requires client certificates; without them the member refuses.
func TestKubeadmLocalOverTLS(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := t.TempDir()
	pki := etcdtest.NewPKI(t, filepath.Join(root, "etc/kubernetes/pki/etcd"))
	m := etcdtest.NewMember(t, t.TempDir(), "cp-1")
	m.ServeTLS(pki)
	m.Start(t)
	l := etcd.KubeadmLocal(root)
	l.Endpoints, l.Helper = []string{m.ClientURL}, etcdtest.Helper(t)
	g.Expect(l.CAFile).To(Equal(pki.CA))
	g.Expect(l.CertFile).To(Equal(pki.ClientCert))
	g.Eventually(func() error { return l.Healthy(ctx) }, 20*time.Second, 200*time.Millisecond).Should(Succeed())
	st, err := l.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Members).To(HaveLen(1))
	var snap bytes.Buffer
	g.Expect(l.Snapshot(ctx, &snap)).To(Succeed())
	g.Expect(snap.Len()).To(BeNumerically(">", 0))

	noCert := &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t), CAFile: pki.CA, RequestTimeout: 2 * time.Second}
	g.Expect(noCert.Healthy(ctx)).NotTo(Succeed(), "a client without a certificate is refused")
}

// TestRestoreMovesTheRevisionForward: after a restore the member's revision is past
// every revision it had before (a client watching from its last revision sees the
// compaction and lists again, instead of waiting for revisions that were lost), and
// the snapshot's data is back. On a restore without the bump the revision went back
// to the snapshot's, which left the API server's watchers blind on the real node.
func TestRestoreMovesTheRevisionForward(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := etcdtest.NewMember(t, t.TempDir(), "solo")
	m.Start(t)
	l := &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t)}
	g.Eventually(func() error { return l.Healthy(ctx) }, 20*time.Second, 200*time.Millisecond).Should(Succeed())
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	_, err = c.Put(ctx, "/k", "snapshot")
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "snap.db")
	f, err := os.Create(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Snapshot(ctx, f)).To(Succeed())
	g.Expect(f.Close()).To(Succeed())
	var last int64
	for i := 0; i < 20; i++ { // the writes the restore loses
		r, err := c.Put(ctx, "/k", "lost")
		g.Expect(err).NotTo(HaveOccurred())
		last = r.Header.Revision
	}

	m.Stop()
	g.Expect(os.Rename(m.DataDir, m.DataDir+".old")).To(Succeed())
	g.Expect(l.Restore(ctx, etcd.RestoreConfig{SnapshotPath: path, DataDir: m.DataDir, Name: "solo", PeerURLs: []string{m.PeerURL},
		InitialCluster: m.InitialCluster, InitialClusterToken: etcd.DefaultInitialClusterToken})).To(Succeed())
	m.Start(t)
	g.Eventually(func() error { return l.Healthy(ctx) }, 20*time.Second, 200*time.Millisecond).Should(Succeed())

	got, err := c.Get(ctx, "/k")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Kvs).To(HaveLen(1))
	g.Expect(string(got.Kvs[0].Value)).To(Equal("snapshot"))
	g.Expect(got.Header.Revision).To(BeNumerically(">", last), "the revision moved past every revision before the restore")
	// A watcher resuming after its last revision is told to list again.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	wr := <-c.Watch(wctx, "/k", clientv3.WithRev(last+1))
	g.Expect(wr.CompactRevision).To(BeNumerically(">", last), "the watch from before the restore sees a compaction")
}
