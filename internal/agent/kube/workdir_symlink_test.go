package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

// hostileWorkDir makes the host's work directory an absolute symlink to a
// directory outside the host root that holds an "attempt" of its own: on the host
// that link resolves inside the host root, never into the agent's file system.
func hostileWorkDir(t *testing.T) (root, outside string) {
	t.Helper()
	root, outside = t.TempDir(), t.TempDir()
	write(t, outside, "/attempts/old/precious", "keep me\n", 0o600)
	symlink(t, outside, filepath.Join(root, WorkDir))
	return root, outside
}

// TestCollectAttemptsStaysInsideTheRoot: collecting finished attempts under a
// symlinked work directory removes nothing outside the host root (today's code
// followed the link and deleted the outside directory's "attempt").
func TestCollectAttemptsStaysInsideTheRoot(t *testing.T) {
	g := NewWithT(t)
	root, outside := hostileWorkDir(t)
	// What the link names, inside the root: the host's real attempts.
	write(t, root, outside+"/attempts/finished/backup/x", "x\n", 0o600)
	write(t, root, outside+"/attempts/current/backup/y", "y\n", 0o600)
	h := &Host{Root: root, Runner: &backendtest.Runner{}}

	got, err := h.Attempts()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(ConsistOf("finished", "current"))
	g.Expect(h.CollectAttempts("current")).To(Succeed())

	g.Expect(filepath.Join(outside, "attempts/old/precious")).To(BeARegularFile(), "nothing outside the root is removed")
	g.Expect(filepath.Join(root, outside, "attempts/finished")).NotTo(BeADirectory())
	g.Expect(filepath.Join(root, outside, "attempts/current/backup/y")).To(BeARegularFile())
}

// TestEtcdSnapshotStaysInsideTheRoot: the snapshot of a real etcd member under a
// symlinked work directory is written inside the host root (today's code wrote it
// into the agent's own file system, where a rollback on the host would not find
// it, and which it could fill).
func TestEtcdSnapshotStaysInsideTheRoot(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m := etcdtest.NewMember(t, t.TempDir(), "solo")
	m.Start(t)
	root, outside := hostileWorkDir(t)
	// Where the link resolves on the host: a real directory inside the root.
	if err := os.MkdirAll(filepath.Join(root, outside), 0o755); err != nil {
		t.Fatal(err)
	}
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t), RequestTimeout: 2 * time.Second}}
	g.Eventually(func() error { return h.EtcdHealthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	n, err := h.EtcdSnapshot(ctx, "a1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(1))
	g.Expect(filepath.Join(root, outside, "attempts/a1", snapshotFile)).To(BeARegularFile(), "inside the root, where the link resolves on the host")
	_, err = os.Lstat(filepath.Join(outside, "attempts/a1"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "nothing written outside the root")
}
