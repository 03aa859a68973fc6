package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// attemptDirs lists the attempt directories on the fixture's host.
func (f *fixture) attemptDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(f.root, kube.AttemptsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func (f *fixture) write(t *testing.T, p, content string) {
	t.Helper()
	full := filepath.Join(f.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) read(p string) string {
	b, err := os.ReadFile(filepath.Join(f.root, p))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}

var failingGate = &gate.Error{Gate: "node-ready", Timeout: time.Second, Err: errors.New("node is not Ready")}

// TestRetryOfTheSamePlanTakesAFreshBackup: the documented retry (the plan is
// withdrawn and asked for again) is a new attempt with backups of its own. With
// backups keyed by plan hash, the second rollback restored the copy taken before
// the first attempt, losing what changed on the node in between.
func TestRetryOfTheSamePlanTakesAFreshBackup(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(t, failingGate)
	f.write(t, "/etc/app.conf", "old\n")
	p := workerPlan(false)

	st, err := f.x.Start(ctx, p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(f.read("/etc/app.conf")).To(Equal("old\n"))
	first := f.attemptDirs(t)
	g.Expect(first).To(HaveLen(1))
	g.Expect(filepath.Join(f.root, kube.AttemptsDir, first[0], "backup/manifest.json")).To(BeARegularFile())

	// Between the attempts the node's file changes (a rotated credential, say).
	f.write(t, "/etc/app.conf", "rotated\n")
	g.Expect(f.x.Forget()).To(Succeed())
	st, err = f.x.Start(ctx, p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(f.read("/etc/app.conf")).To(Equal("rotated\n"), "the retry's rollback restores what the node had before the retry")

	second := f.attemptDirs(t)
	g.Expect(second).To(HaveLen(1), "the first attempt's files were removed when the second started")
	g.Expect(second[0]).NotTo(Equal(first[0]))
	backup, err := os.ReadFile(filepath.Join(f.root, kube.AttemptsDir, second[0], "backup/files/etc/app.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(backup)).To(Equal("rotated\n"))
}

// TestABAKeepsTheLastCommittedAttemptUntilTheNextCommits: A, then B, then A
// again each commit with backups of their own; the last committed attempt's files
// stay while the next runs and go when it commits.
func TestABAKeepsTheLastCommittedAttemptUntilTheNextCommits(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(t, nil)
	f.write(t, "/etc/app.conf", "before\n")
	plan := func(content string) *protocol.NodePlan {
		p := workerPlan(false)
		p.Kubernetes.Action = protocol.KubeadmNone
		p.Files = []protocol.File{{Path: "/etc/app.conf", Content: []byte(content)}}
		return p
	}
	a, b := plan("A\n"), plan("B\n")

	st, err := f.x.Start(ctx, a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	attemptA := f.attemptDirs(t)
	g.Expect(attemptA).To(HaveLen(1))

	// B stops before its gates: A's files are still there beside B's.
	cctx, cancel := context.WithCancel(ctx)
	f.x.Journal = &crashAt{Journal: f.journal, action: string(state.ActGates), cancel: cancel}
	_, err = f.x.Start(cctx, b)
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(f.attemptDirs(t)).To(HaveLen(2))
	g.Expect(f.attemptDirs(t)).To(ContainElement(attemptA[0]))
	st, err = f.x.Resume(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	attemptB := f.attemptDirs(t)
	g.Expect(attemptB).To(HaveLen(1), "B committed: A's files are collected")
	g.Expect(attemptB[0]).NotTo(Equal(attemptA[0]))
	g.Expect(f.read("/etc/app.conf")).To(Equal("B\n"))

	// A again: a new attempt whose backup holds B's content; a failure restores B.
	f.x.Gates = gates{failingGate}
	st, err = f.x.Start(ctx, a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(f.read("/etc/app.conf")).To(Equal("B\n"))
	g.Expect(f.attemptDirs(t)).To(HaveLen(2), "B (last committed) and the rolled-back A")
	g.Expect(f.x.Forget()).To(Succeed())
	f.x.Gates = gates{nil}
	st, err = f.x.Start(ctx, a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(f.read("/etc/app.conf")).To(Equal("A\n"))
	g.Expect(f.attemptDirs(t)).To(HaveLen(1))
	g.Expect(f.attemptDirs(t)).NotTo(ContainElement(attemptB[0]))
}

// fullJournal fails every save after the first n with ENOSPC, like a full disk.
type fullJournal struct {
	journal.Journal
	n int
}

func (j *fullJournal) Save(e journal.Entry) error {
	if j.n <= 0 {
		return fmt.Errorf("save journal: write /var/lib/capi-inplace/.journal.json.tmp-1: %w", &os.PathError{Op: "write", Path: "journal", Err: syscall.ENOSPC})
	}
	j.n--
	return j.Journal.Save(e)
}

// TestJournalOnAFullDiskIsReported: the agent cannot save its journal and says
// so on the Node (reason DiskFull) instead of retrying silently; once there is
// room the plan resumes and finishes.
func TestJournalOnAFullDiskIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := newFixture(t, nil)
	fj := &fullJournal{Journal: f.journal, n: 3}
	f.x.Journal = fj
	_, err := f.x.Start(ctx, workerPlan(false))
	g.Expect(err).To(MatchError(syscall.ENOSPC))
	last := f.reports.last()
	g.Expect(last.Reason).To(Equal(protocol.ReasonDiskFull))
	g.Expect(last.Message).To(ContainSubstring("the host's disk is full"))
	g.Expect(last.PlanHash).NotTo(BeEmpty())

	fj.n = 1 << 20 // room again
	st, err := f.x.Resume(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
}

// memberStub is an etcd member for executor tests: a database of dbSize bytes in
// a cluster of members members; writeErr makes the snapshot stream fail.
type memberStub struct {
	members  int
	dbSize   int64
	writeErr error
}

func (m *memberStub) Status(context.Context) (etcd.Status, error) {
	st := etcd.Status{ClusterID: 7, DBSize: m.dbSize}
	for i := range m.members {
		st.Members = append(st.Members, etcd.MemberInfo{ID: uint64(i + 1), Name: fmt.Sprintf("m%d", i)})
	}
	return st, nil
}
func (m *memberStub) Healthy(context.Context) error { return nil }
func (m *memberStub) Snapshot(_ context.Context, w io.Writer) error {
	if _, err := w.Write(make([]byte, 4096)); err != nil {
		return err
	}
	return m.writeErr
}
func (m *memberStub) Restore(context.Context, etcd.RestoreConfig) error {
	return errors.New("not in this test")
}
func (m *memberStub) Stopped(context.Context, string) (bool, error) { return true, nil }

func cpPlan() *protocol.NodePlan {
	p := protocol.NewPlan("cp1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, EtcdSnapshot: true}
	return p
}

// TestSnapshotOnAFullDisk: too little free space for the snapshot, or a write
// that hits ENOSPC, fails the update before anything changed, with reason DiskFull.
func TestSnapshotOnAFullDisk(t *testing.T) {
	tests := []struct {
		name    string
		member  *memberStub
		free    uint64
		message string
	}{
		{"free space below the snapshot's need", &memberStub{members: 1, dbSize: 100 << 20}, 50 << 20, "needs"},
		{"ENOSPC while writing", &memberStub{members: 1, dbSize: 1 << 20, writeErr: &os.PathError{Op: "write", Path: "snapshot", Err: syscall.ENOSPC}}, 1 << 40, "no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			f.kube.Etcd = tt.member
			f.kube.FreeBytes = func(string) (uint64, error) { return tt.free, nil }
			st, err := f.x.Start(context.Background(), cpPlan())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase).To(Equal(protocol.PhaseFailed))
			last := f.reports.last()
			g.Expect(last.Reason).To(Equal(protocol.ReasonDiskFull))
			g.Expect(last.Message).To(ContainSubstring(tt.message))
			g.Expect(f.runner.Calls()).To(BeEmpty(), "nothing ran after the snapshot failed")
			dirs := f.attemptDirs(t)
			g.Expect(dirs).To(HaveLen(1))
			entries, _ := os.ReadDir(filepath.Join(f.root, kube.AttemptsDir, dirs[0]))
			for _, e := range entries {
				g.Expect(e.Name()).NotTo(ContainSubstring("snapshot"), "no snapshot or partial snapshot is left")
			}
		})
	}
}

// TestMultiMemberRollbackDoesNotRestoreEtcd: the member count the snapshot saw
// reaches the state machine, and a three-member control plane's rollback has no
// etcd restore (with one member it has).
func TestMultiMemberRollbackDoesNotRestoreEtcd(t *testing.T) {
	for _, members := range []int{3, 1} {
		t.Run(fmt.Sprint(members), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, failingGate)
			f.kube.Etcd = &memberStub{members: members, dbSize: 1 << 20}
			f.kube.FreeBytes = func(string) (uint64, error) { return 1 << 40, nil }
			st, err := f.x.Start(context.Background(), cpPlan())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.EtcdMembers).To(Equal(members))
			if members == 3 {
				g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
				g.Expect(names(st.Rollback)).NotTo(ContainElement(state.ActRestoreEtcd))
			} else {
				g.Expect(names(st.Rollback)).To(ContainElement(state.ActRestoreEtcd))
			}
		})
	}
}
