package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

type rebooter struct {
	mu   sync.Mutex
	boot int
	sim  *simulated.Backend
	// fallBack: the next reboots boot the fallback slot (the new one does not
	// come up), counting down.
	fallBack int
}

func (r *rebooter) Reboot(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.boot++
	boot := r.sim.Boot
	if r.fallBack > 0 {
		r.fallBack--
		boot = r.sim.FallBack
	}
	if err := boot(); err != nil {
		return err
	}
	return ErrRebooted
}

func (r *rebooter) BootID(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("boot-%d", r.boot), nil
}

type reports struct {
	mu  sync.Mutex
	all []protocol.NodeStatus
}

func (r *reports) Report(s protocol.NodeStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, s)
}

func (r *reports) last() protocol.NodeStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all[len(r.all)-1]
}

type gates struct{ err error }

func (g gates) Run(context.Context, *protocol.NodePlan) error { return g.err }

// crashAt wraps the journal: when the executor is about to record that the named
// action starts, it cancels the run instead, once, as a crash just before the
// action would.
type crashAt struct {
	journal.Journal
	action string
	cancel context.CancelFunc
}

func (c *crashAt) Save(e journal.Entry) error {
	if e.InFlight == c.action && c.cancel != nil {
		c.cancel()
		c.cancel = nil
		return context.Canceled
	}
	return c.Journal.Save(e)
}

// failing wraps the host: its calls on behalf of the named actions fail.
type failing struct {
	Host
	fail map[string]error
}

func (f failing) fault(ctx context.Context) error {
	key, _ := ActionFrom(ctx)
	return f.fail[key]
}

func (f failing) Restore(ctx context.Context, attempt string) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Host.Restore(ctx, attempt)
}

// flaky fails the restore of rollback action key with err while left is above
// zero, counting down.
type flaky struct {
	Host
	key  string
	left *int
	err  error
}

func (f flaky) Restore(ctx context.Context, attempt string) error {
	if key, _ := ActionFrom(ctx); key == f.key && *f.left > 0 {
		*f.left--
		return f.err
	}
	return f.Host.Restore(ctx, attempt)
}

type fixture struct {
	root    string
	journal *journal.Memory
	runner  *backendtest.Runner
	reboots *rebooter
	reports *reports
	kube    *kube.Host
	x       *Executor
	// pauses are the executor's waits before running a failed rollback
	// action again, which the fixture does not sleep.
	pauses []time.Duration
}

func newFixture(t *testing.T, gateErr error) *fixture {
	t.Helper()
	root := t.TempDir()
	sim := simulated.New(root)
	f := &fixture{root: root, journal: &journal.Memory{}, runner: &backendtest.Runner{}, reboots: &rebooter{sim: sim}, reports: &reports{}}
	f.runner.On("kubeadm version", "v1.36.0\n", nil).On("kubeadm upgrade", "", nil).On("systemctl", "", nil)
	f.kube = &kube.Host{Root: root, Runner: f.runner}
	f.x = &Executor{
		Journal: f.journal,
		Kube:    f.kube,
		Gates:   gates{gateErr},
		Backends: func(name string) (backend.Backend, error) {
			switch name {
			case "none":
				return none.New(), nil
			case "simulated":
				return sim, nil
			}
			return nil, errors.New("unknown")
		},
		Rebooter: f.reboots,
		Reporter: f.reports,
		Now:      func() time.Time { return time.Unix(1000, 0) },
		Log:      logr.Discard(),
		After: func(d time.Duration) <-chan time.Time {
			f.pauses = append(f.pauses, d)
			c := make(chan time.Time, 1)
			c <- time.Unix(1000, 0)
			return c
		},
	}
	return f
}

func workerPlan(os bool) *protocol.NodePlan {
	p := protocol.NewPlan("w1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	p.Files = []protocol.File{{Path: "/etc/app.conf", Content: []byte("new\n")}}
	if os {
		p.OS = &protocol.OSImage{Backend: "simulated", Ref: "sim:os-v2", Digest: simulated.DigestOf([]byte("sim:os-v2"))}
	}
	return p
}

func TestRunToCommit(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	p := workerPlan(true)
	st, err := f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	runs, _ := f.x.Runs()
	for _, a := range state.Derive(st.Spec) {
		g.Expect(runs[a.Key()]).To(Equal(1), a.Key())
	}
	g.Expect(f.reboots.boot).To(Equal(1))
	g.Expect(f.runner.Calls()).To(Equal([]string{"kubeadm version -o short", "kubeadm upgrade node", "systemctl daemon-reload", "systemctl restart kubelet"}))
	data, err := os.ReadFile(filepath.Join(f.root, "etc/app.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal("new\n"))
	last := f.reports.last()
	g.Expect(last.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(last.UpdatedAt).To(Equal(time.Unix(1000, 0).UTC()))
	status, _ := f.reboots.sim.Status(context.Background())
	g.Expect(status.Booted).To(Equal(p.OS.Digest))

	// Observing the same plan again does nothing.
	st, err = f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	runs, _ = f.x.Runs()
	g.Expect(runs["gates"]).To(Equal(1))
}

func TestCrashBeforeEveryActionResumesExactly(t *testing.T) {
	p := workerPlan(true)
	spec := state.SpecFor(p, simulated.New("").Capabilities())
	for _, a := range state.Derive(spec) {
		t.Run(a.Key(), func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			f.x.Journal = &crashAt{Journal: f.journal, action: a.Key(), cancel: cancel}
			_, err := f.x.Start(ctx, p)
			g.Expect(err).To(MatchError(context.Canceled))
			st, _, err := f.x.Load()
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase.Terminal()).To(BeFalse())

			st, err = f.x.Resume(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
			runs, _ := f.x.Runs()
			for _, b := range state.Derive(spec) {
				g.Expect(runs[b.Key()]).To(Equal(1), b.Key())
			}
		})
	}
}

func TestFailedGateRollsBackFilesAndImage(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, &gate.Error{Gate: "node-ready", Timeout: time.Second, Err: errors.New("node is not Ready")})
	g.Expect(os.MkdirAll(filepath.Join(f.root, "etc"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(f.root, "etc/app.conf"), []byte("old\n"), 0o644)).To(Succeed())
	p := workerPlan(true)
	st, err := f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	data, _ := os.ReadFile(filepath.Join(f.root, "etc/app.conf"))
	g.Expect(string(data)).To(Equal("old\n"))
	status, _ := f.reboots.sim.Status(context.Background())
	g.Expect(status.Booted).To(Equal(simulated.DigestOf([]byte(simulated.InitialRef))), "booted back into the old image")
	g.Expect(f.reboots.boot).To(Equal(2))
	last := f.reports.last()
	g.Expect(last.Reason).To(Equal(state.ReasonGateFailed))
	g.Expect(last.Message).To(ContainSubstring("gate node-ready did not pass within 1s: node is not Ready"))
	runs, _ := f.x.Runs()
	g.Expect(runs).To(HaveKeyWithValue("rollback/restore-files", 1))
	g.Expect(runs).To(HaveKeyWithValue("rollback/backend-rollback", 1))
	g.Expect(runs).To(HaveKeyWithValue("rollback/reboot", 1))
	g.Expect(runs).NotTo(HaveKey("backend-commit"))
}

func TestWrongDigestFailsWithoutChange(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	p := workerPlan(true)
	p.OS.Digest = simulated.DigestOf([]byte("something else"))
	st, err := f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	// Stage refused the artifact; rollback of a stage is a no-op, so it rolls back.
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.Reason).To(Equal(state.ReasonArtifactRefused))
	_, err = os.Stat(filepath.Join(f.root, "etc/app.conf"))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no file was written")
	g.Expect(f.runner.Calls()).To(BeEmpty())
}

func TestFailureDuringRollbackIsFailed(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, &gate.Error{Gate: "kubelet-version", Timeout: time.Second, Err: errors.New("kubelet reports v1.35.0")})
	f.x.Kube = failing{Host: f.kube, fail: map[string]error{"rollback/restore-files": errors.New("disk full")}}
	st, err := f.x.Start(context.Background(), workerPlan(false))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseFailed))
	last := f.reports.last()
	g.Expect(last.Reason).To(Equal(state.ReasonRollbackFailed))
	g.Expect(last.Message).To(ContainSubstring("rollback action restore-files failed: disk full"))
	runs, err := f.x.Runs()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveKeyWithValue("rollback/restore-files", state.RollbackAttempts), "the failed rollback action ran its attempts")
	g.Expect(f.pauses).To(Equal([]time.Duration{state.RollbackRetryDelay(1), state.RollbackRetryDelay(2)}))
}

// TestRollbackActionRunsAgainAfterAFailure: a rollback action that fails once
// (a slow node) runs again after a pause and the rollback ends RolledBack; the
// journal keeps the failure.
func TestRollbackActionRunsAgainAfterAFailure(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, &gate.Error{Gate: "kubelet-version", Timeout: time.Second, Err: errors.New("kubelet reports v1.35.0")})
	left := 1
	f.x.Kube = flaky{Host: f.kube, key: "rollback/restore-files", left: &left, err: errors.New("the kubelet still runs the static pod")}
	st, err := f.x.Start(context.Background(), workerPlan(false))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.RollbackError).To(BeEmpty())
	g.Expect(f.reports.last().Phase).To(Equal(protocol.PhaseRolledBack))
	runs, err := f.x.Runs()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(runs).To(HaveKeyWithValue("rollback/restore-files", 2))
	g.Expect(f.pauses).To(Equal([]time.Duration{state.RollbackRetryDelay(1)}))
	g.Expect(st.Rollback).To(ContainElement(state.Action{Name: state.ActRestoreFiles, Rollback: true, Done: true, Failures: 1}))
}

func TestRejectAndForget(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	st, err := f.x.Reject("abc", state.ReasonInvalidPlan, "decode: unexpected end of JSON input")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseFailed))
	g.Expect(f.reports.last().Message).To(Equal("decode: unexpected end of JSON input"))
	g.Expect(f.x.Forget()).To(Succeed())
	st, _, err = f.x.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.PlanHash).To(BeEmpty())
}

func TestComponentConfigRerenderedOnlyWhenChanged(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	plan := func(cc string) *protocol.NodePlan {
		p := protocol.NewPlan("cp1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmNone}
		p.ClusterConfiguration = json.RawMessage(cc)
		return p
	}
	count := func() int {
		n := 0
		for _, c := range f.runner.Calls() {
			if c == "kubeadm upgrade node --certificate-renewal=false" {
				n++
			}
		}
		return n
	}
	// First plan on this node: nothing known, re-render.
	st, err := f.x.Start(context.Background(), plan(`{"apiServer":{"extraArgs":[{"name":"v","value":"2"}]}}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(count()).To(Equal(1))
	// Same ClusterConfiguration, another change: no re-render.
	p := plan(`{"apiServer":{"extraArgs":[{"name":"v","value":"2"}]}}`)
	p.Files = []protocol.File{{Path: "/etc/x", Content: []byte("x")}}
	st, err = f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(count()).To(Equal(1))
	// Changed component args: re-render.
	st, err = f.x.Start(context.Background(), plan(`{"apiServer":{"extraArgs":[{"name":"v","value":"4"}]}}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names(st.Actions)).To(ContainElement(state.ActControlPlaneConfig))
	g.Expect(count()).To(Equal(2))
}

func names(as []state.Action) []state.ActionName {
	out := make([]state.ActionName, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}
