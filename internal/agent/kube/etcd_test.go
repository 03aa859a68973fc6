package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func etcdClient(t *testing.T, urls ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: urls, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func get(ctx context.Context, c *clientv3.Client, key string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.Get(ctx, key)
	if err != nil {
		return "<error: " + err.Error() + ">"
	}
	if len(r.Kvs) == 0 {
		return "<none>"
	}
	return string(r.Kvs[0].Value)
}

// TestRestoreSingleMemberEtcdIsJoinable runs the agent's restore against a real
// etcd whose "kubelet" (etcdtest.Kubelet) runs it from the static pod manifest:
// the member is stopped, restored to the snapshot's data with its own name and
// peer URL, started again, and a second member can join it afterwards, as a
// later `kubeadm join` of a control-plane node needs.
func TestRestoreSingleMemberEtcdIsJoinable(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := t.TempDir()
	m := etcdtest.NewMember(t, t.TempDir(), "cp-1")
	write(t, root, EtcdManifest, string(etcdtest.Manifest(m, EtcdDataDir)), 0o600)
	etcdtest.Kubelet(t, root, m)
	member := &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t), RequestTimeout: 2 * time.Second}
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: member}
	g.Eventually(func() error { return h.EtcdHealthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	c := etcdClient(t, m.ClientURL)
	before, err := c.MemberList(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	_, err = c.Put(ctx, "/registry/k1", "at-snapshot")
	g.Expect(err).NotTo(HaveOccurred())
	n, err := h.EtcdSnapshot(ctx, "a1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	g.Expect(filepath.Join(root, SnapshotPath("a1"))).To(BeARegularFile())
	_, err = c.Put(ctx, "/registry/k1", "after-snapshot")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Put(ctx, "/registry/k2", "after-snapshot")
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(h.RestoreEtcd(ctx, "a1")).To(Succeed())
	g.Expect(filepath.Join(root, EtcdManifest)).To(BeARegularFile(), "the manifest is back")
	g.Expect(filepath.Join(root, attemptDir("a1"), "etcd-replaced", "member")).To(BeADirectory(), "the replaced data is kept")
	g.Eventually(func() error { return h.EtcdHealthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	g.Expect(get(ctx, c, "/registry/k1")).To(Equal("at-snapshot"))
	g.Expect(get(ctx, c, "/registry/k2")).To(Equal("<none>"))
	after, err := c.MemberList(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Members).To(HaveLen(1))
	g.Expect(after.Members[0].Name).To(Equal("cp-1"))
	g.Expect(after.Members[0].PeerURLs).To(Equal([]string{m.PeerURL}))
	g.Expect(after.Members[0].ID).To(Equal(before.Members[0].ID), "same name, peer URL and token give the same member ID")

	// Idempotent: a repeat (crash before the result was journaled) changes nothing.
	_, err = c.Put(ctx, "/registry/k3", "after-restore")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.RestoreEtcd(ctx, "a1")).To(Succeed())
	g.Expect(get(ctx, c, "/registry/k3")).To(Equal("after-restore"))

	// Joinable: a second member is added through etcd's API and syncs.
	m2 := etcdtest.NewMember(t, t.TempDir(), "cp-2")
	_, err = c.MemberAdd(ctx, []string{m2.PeerURL})
	g.Expect(err).NotTo(HaveOccurred())
	m2.InitialCluster = "cp-1=" + m.PeerURL + ",cp-2=" + m2.PeerURL
	m2.Extra = []string{"--initial-cluster-state=existing"}
	m2.Start(t)
	c2 := etcdClient(t, m2.ClientURL)
	g.Eventually(func() string { return get(ctx, c2, "/registry/k1") }, 60*time.Second, 500*time.Millisecond).Should(Equal("at-snapshot"))
	g.Eventually(func() error {
		return (&etcd.Local{Endpoints: []string{m2.ClientURL}, Helper: etcdtest.Helper(t)}).Healthy(ctx)
	}, 30*time.Second, 500*time.Millisecond).Should(Succeed())
	list, err := c.MemberList(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Members).To(HaveLen(2))
	for _, mm := range list.Members {
		g.Expect(mm.Name).NotTo(BeEmpty(), "both members started")
	}
}

// TestRestoreEtcdRefusesAMultiMemberSnapshot: whatever schedules it, a restore
// from a snapshot of a cluster of several members is refused before the member
// is touched.
func TestRestoreEtcdRefusesAMultiMemberSnapshot(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, EtcdManifest, "spec: {}\n", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"a"},{"Name":"b"},{"Name":"c"}]}`, 0o600)
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: &etcd.Local{Endpoints: []string{"http://127.0.0.1:1"}}}
	err := h.RestoreEtcd(context.Background(), "a1")
	g.Expect(err).To(MatchError(etcd.ErrNotSingleMember))
	g.Expect(filepath.Join(root, EtcdManifest)).To(BeARegularFile(), "the member was not stopped")
	_, err = os.Stat(filepath.Join(root, attemptDir("a1"), "etcd.yaml"))
	g.Expect(os.IsNotExist(err)).To(BeTrue())
}

// grownMember is a running member whose cluster gained a second member since
// the snapshot.
type grownMember struct{ failingRestore }

func (*grownMember) Status(context.Context) (etcd.Status, error) {
	return etcd.Status{ClusterID: 7, Members: []etcd.MemberInfo{{ID: 1, Name: "cp-1"}, {ID: 2, Name: "cp-2"}}}, nil
}

// TestRestoreEtcdRechecksMembership: a snapshot of one member is not restored
// into a cluster that has two members at restore time; neither etcd nor the API
// server is stopped.
func TestRestoreEtcdRechecksMembership(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	manifest := "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd]\n"
	write(t, root, EtcdManifest, manifest, 0o600)
	write(t, root, APIServerManifest, "apiserver\n", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: &grownMember{}}
	err := h.RestoreEtcd(context.Background(), "a1")
	g.Expect(err).To(MatchError(etcd.ErrNotSingleMember))
	g.Expect(err.Error()).To(ContainSubstring("it has 2 now"))
	g.Expect(read(t, root, EtcdManifest)).To(Equal(manifest), "the member was not stopped")
	g.Expect(read(t, root, APIServerManifest)).To(Equal("apiserver\n"), "the API server was not stopped")
}

// failingRestore is a stopped member whose restore fails.
type failingRestore struct{ etcd.Local }

func (*failingRestore) Stopped(context.Context, string) (bool, error) { return true, nil }
func (*failingRestore) Restore(context.Context, etcd.RestoreConfig) error {
	return errors.New("snapshot file has wrong sha256 checksum")
}

// TestFailedRestoreStartsTheMemberAgain: a restore that fails before the data
// directory is swapped puts the manifest back, so the member runs on its own,
// intact data instead of staying down.
func TestFailedRestoreStartsTheMemberAgain(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	manifest := "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.5:2380]\n"
	write(t, root, EtcdManifest, manifest, 0o600)
	write(t, root, EtcdDataDir+"/member/snap/db", "current", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: &failingRestore{},
		Rescue: &RescuePod{Image: "registry.example/capi-inplace-agent:v1", HostRoot: "/host"}}
	err := h.RestoreEtcd(context.Background(), "a1")
	g.Expect(err).To(MatchError(ContainSubstring("wrong sha256 checksum")))
	g.Expect(read(t, root, EtcdManifest)).To(Equal(manifest), "the member is started again")
	g.Expect(read(t, root, EtcdDataDir+"/member/snap/db")).To(Equal("current"))
	g.Expect(filepath.Join(root, RescueManifest)).NotTo(BeAnExistingFile(), "nothing left to rescue")
}
