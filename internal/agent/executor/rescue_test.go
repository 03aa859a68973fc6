package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const (
	oldAPIServer = "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --secure-port=6443]\n"
	newAPIServer = "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --secure-port=6443, --bad-flag]\n"
)

// rescueFixture is a control plane (external etcd: no snapshot) with the rescue
// pod known to its Kubernetes layer and the old API server's manifest in place.
func rescueFixture(t *testing.T, gateErr error) *fixture {
	t.Helper()
	f := newFixture(t, gateErr)
	f.kube.Rescue = &kube.RescuePod{Image: "agent:v1", Args: []string{"rescue"}, HostRoot: "/host"}
	writeFile(t, f.root, kube.APIServerManifest, oldAPIServer)
	return f
}

func writeFile(t *testing.T, root, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rescuePlan() *protocol.NodePlan {
	p := protocol.NewPlan("cp1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, ExternalEtcd: true}
	p.Files = []protocol.File{{Path: "/etc/app.conf", Content: []byte("new\n")}}
	return p
}

// armedAt wraps the host: it records, at every call for an action, whether
// the rescue pod was in place; kubeadm writes the new API server's manifest,
// and then, with cut set, the process dies (cut cancels the run).
type armedAt struct {
	Host
	root  string
	armed map[string]bool
	cut   context.CancelFunc
}

func (a *armedAt) note(ctx context.Context) {
	key, _ := ActionFrom(ctx)
	_, err := os.Stat(filepath.Join(a.root, kube.RescueManifest))
	a.armed[key] = err == nil
}

func (a *armedAt) Backup(ctx context.Context, attempt string, paths []string) error {
	a.note(ctx)
	return a.Host.Backup(ctx, attempt, paths)
}

func (a *armedAt) WriteFiles(ctx context.Context, files []protocol.File) error {
	a.note(ctx)
	return a.Host.WriteFiles(ctx, files)
}

func (a *armedAt) InstallKubeadm(ctx context.Context, k protocol.KubernetesPlan) error {
	a.note(ctx)
	return a.Host.InstallKubeadm(ctx, k)
}

func (a *armedAt) InstallKubelet(ctx context.Context, k protocol.KubernetesPlan) error {
	a.note(ctx)
	return a.Host.InstallKubelet(ctx, k)
}

func (a *armedAt) KubeadmUpgrade(ctx context.Context, k protocol.KubernetesPlan) error {
	a.note(ctx)
	if err := os.WriteFile(filepath.Join(a.root, kube.APIServerManifest), []byte(newAPIServer), 0o600); err != nil {
		return err
	}
	if a.cut != nil {
		a.cut()
		return context.Canceled
	}
	return a.Host.KubeadmUpgrade(ctx, k)
}

func (a *armedAt) RestartKubelet(ctx context.Context) error {
	a.note(ctx)
	return a.Host.RestartKubelet(ctx)
}

func (a *armedAt) Restore(ctx context.Context, attempt string) error {
	a.note(ctx)
	return a.Host.Restore(ctx, attempt)
}

// TestRescueArmedFromTheFirstBootChange: on a control plane the rescue pod is
// in place before the first action that changes what the node boots into (the
// plan's files here; the backup changes nothing) and through the gates and the
// rollback, and removed when the update ends; a worker never has it.
func TestRescueArmedFromTheFirstBootChange(t *testing.T) {
	tests := []struct {
		name    string
		plan    *protocol.NodePlan
		gateErr error
		want    map[string]bool
		end     protocol.Phase
	}{
		{"control plane, committed", rescuePlan(), nil, map[string]bool{
			"backup-files": false, "write-files": true, "install-kubeadm": true, "kubeadm-upgrade": true, "install-kubelet": true, "restart-kubelet": true,
		}, protocol.PhaseCommitted},
		{"control plane, rolled back", rescuePlan(), &gate.Error{Gate: "node-ready", Timeout: time.Second, Err: errors.New("not Ready")}, map[string]bool{
			"backup-files": false, "write-files": true, "install-kubeadm": true, "kubeadm-upgrade": true, "install-kubelet": true, "restart-kubelet": true,
			"rollback/restore-files": true, "rollback/restart-kubelet": true,
		}, protocol.PhaseRolledBack},
		{"worker, committed", workerPlan(false), nil, map[string]bool{
			"backup-files": false, "write-files": false, "install-kubeadm": false, "kubeadm-upgrade": false, "install-kubelet": false, "restart-kubelet": false,
		}, protocol.PhaseCommitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := rescueFixture(t, tt.gateErr)
			rec := &armedAt{Host: f.kube, root: f.root, armed: map[string]bool{}}
			f.x.Kube = rec
			st, err := f.x.Start(context.Background(), tt.plan)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Phase).To(Equal(tt.end))
			g.Expect(rec.armed).To(Equal(tt.want))
			g.Expect(filepath.Join(f.root, kube.RescueManifest)).NotTo(BeAnExistingFile(), "the update is over")
		})
	}
}

// TestRescueArmingFailureStopsTheAction: an action the rescue pod must cover
// does not run without it; it fails with the node unchanged by it.
func TestRescueArmingFailureStopsTheAction(t *testing.T) {
	g := NewWithT(t)
	f := rescueFixture(t, nil)
	// A directory where the manifest goes: it cannot be written.
	g.Expect(os.MkdirAll(filepath.Join(f.root, kube.RescueManifest, "x"), 0o755)).To(Succeed())
	rec := &armedAt{Host: f.kube, root: f.root, armed: map[string]bool{}}
	f.x.Kube = rec
	st, err := f.x.Start(context.Background(), rescuePlan())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseFailed), "nothing after the backup ran: nothing to roll back")
	g.Expect(st.FailedAction).To(Equal(state.ActWriteFiles))
	g.Expect(st.Message).To(ContainSubstring("put the rescue static pod in place"))
	g.Expect(rec.armed).To(HaveKey("backup-files"))
	g.Expect(rec.armed).NotTo(HaveKey("write-files"))
	g.Expect(filepath.Join(f.root, "etc/app.conf")).NotTo(BeAnExistingFile())
}

// TestRollBackFailsTheActionInFlight: the rescue's rollback of an update whose
// kubeadm upgrade a power cut interrupted fails that action (never repeated),
// restores what the update changed, journals each step and removes the pod.
func TestRollBackFailsTheActionInFlight(t *testing.T) {
	g := NewWithT(t)
	f := rescueFixture(t, nil)
	ctx, cut := context.WithCancel(context.Background())
	f.x.Kube = &armedAt{Host: f.kube, root: f.root, armed: map[string]bool{}, cut: cut}
	_, err := f.x.Start(ctx, rescuePlan())
	g.Expect(err).To(MatchError(context.Canceled))
	g.Expect(readFile(t, f.root, kube.APIServerManifest)).To(Equal(newAPIServer))
	g.Expect(filepath.Join(f.root, kube.RescueManifest)).To(BeAnExistingFile())

	// The rescue pod, after the reboot.
	f.x.Kube = f.kube
	f.reboots.boot++
	st, err := f.x.RollBack(context.Background(), state.ReasonAPIServerNotBack, "the API server did not come back")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.FailedAction).To(Equal(state.ActKubeadmUpgrade))
	g.Expect(readFile(t, f.root, kube.APIServerManifest)).To(Equal(oldAPIServer))
	g.Expect(filepath.Join(f.root, "etc/app.conf")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(f.root, kube.RescueManifest)).NotTo(BeAnExistingFile())
	runs, _ := f.x.Runs()
	g.Expect(runs).To(Equal(map[string]int{"backup-files": 1, "write-files": 1, "install-kubeadm": 1, "kubeadm-upgrade": 1,
		"rollback/restore-files": 1, "rollback/restart-kubelet": 1}))
	last := f.reports.last()
	g.Expect(last.Reason).To(Equal(state.ReasonAPIServerNotBack))
	g.Expect(last.Message).To(HavePrefix("rolled back because kubeadm-upgrade failed: the API server did not come back"))

	// A finished update is left as it is.
	again, err := f.x.RollBack(context.Background(), state.ReasonAPIServerNotBack, "again")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(again.Message).To(Equal(st.Message))
}

// TestRollBackBetweenActions: with no action in flight, the one the update
// would have run next fails as never started, so the rollback undoes only what
// was done.
func TestRollBackBetweenActions(t *testing.T) {
	g := NewWithT(t)
	f := rescueFixture(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.x.Journal = &crashAt{Journal: f.journal, action: "install-kubeadm", cancel: cancel}
	_, err := f.x.Start(ctx, rescuePlan())
	g.Expect(err).To(MatchError(context.Canceled))
	f.x.Journal = f.journal
	st, err := f.x.RollBack(context.Background(), state.ReasonAPIServerNotBack, "not back")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.FailedAction).To(Equal(state.ActInstallKubeadm))
	runs, _ := f.x.Runs()
	g.Expect(runs).To(Equal(map[string]int{"backup-files": 1, "write-files": 1, "rollback/restore-files": 1, "rollback/restart-kubelet": 1}))
}
