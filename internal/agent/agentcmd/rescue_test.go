package agentcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The node's files before the update, and what the update puts there.
const (
	oldKubelet = "kubelet v1.35.0\n"
	newKubelet = "kubelet v1.36.0\n"
	oldKubeadm = "kubeadm v1.35.0\n"
	newKubeadm = "kubeadm v1.36.0\n"
)

// apiServerManifest is a kube-apiserver manifest that listens on port.
func apiServerManifest(port, extra string) string {
	return "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --secure-port=" + port + extra + "]\n"
}

func writeHost(t *testing.T, root, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readHost(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Stat(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	port, err := freeport.Port()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(port)
}

// fixedBoot is a node's boot: its ID never changes (a reboot happened before).
type fixedBoot string

func (b fixedBoot) Reboot(context.Context) error           { return errors.New("no reboot in this test") }
func (b fixedBoot) BootID(context.Context) (string, error) { return string(b), nil }

// newBinaries is the node's package source: kubeadm and kubelet of the new release.
type newBinaries struct{ root string }

func (b newBinaries) Install(_ context.Context, hostPath, _ string) error {
	content := map[string]string{kube.KubeletBinary: newKubelet, kube.KubeadmBinary: newKubeadm}[hostPath]
	return os.WriteFile(filepath.Join(b.root, hostPath), []byte(content), 0o755)
}

// powerCut wraps the agent's Kubernetes layer: kubeadm writes an API server
// manifest that listens on newPort, and the node loses power before kubeadm
// returns (nothing after that line runs).
type powerCut struct {
	executor.Host
	root, newPort string
}

func (p powerCut) KubeadmUpgrade(context.Context, protocol.KubernetesPlan) error {
	writeManifest := os.WriteFile(filepath.Join(p.root, kube.APIServerManifest), []byte(apiServerManifest(p.newPort, ", --bad-flag")), 0o600)
	if writeManifest != nil {
		return writeManifest
	}
	runtime.Goexit()
	return nil
}

// controlPlane is a single control plane (external etcd, so no snapshot) whose
// update to v1.36 lost power during its kubeadm upgrade, after kubeadm wrote an
// API server manifest listening on newPort: the agent's journal has the upgrade
// in flight and the rescue pod in place.
type controlPlane struct {
	root    string
	oldPort string
	journal *journal.File
}

func cutDuringKubeadm(t *testing.T, newPort string) *controlPlane {
	t.Helper()
	g := NewWithT(t)
	cp := &controlPlane{root: t.TempDir(), oldPort: freePort(t)}
	writeHost(t, cp.root, kube.KubeletBinary, oldKubelet)
	writeHost(t, cp.root, kube.KubeadmBinary, oldKubeadm)
	writeHost(t, cp.root, kube.APIServerManifest, apiServerManifest(cp.oldPort, ""))
	jr, err := journal.NewFile(filepath.Join(cp.root, kube.WorkDir))
	g.Expect(err).NotTo(HaveOccurred())
	cp.journal = jr

	runner := (&backendtest.Runner{}).On("kubeadm version", "v1.36.0\n", nil).On("systemctl", "", nil)
	host := &kube.Host{Root: cp.root, Runner: runner, Binaries: newBinaries{root: cp.root}, Rescue: rescuePod("agent:v1", agent.NodeConfigPath)}
	x := &executor.Executor{
		Journal: jr, Kube: powerCut{Host: host, root: cp.root, newPort: newPort},
		Gates:    noGates{},
		Backends: lookupBackend(withNone(nil)),
		Rebooter: fixedBoot("boot-1"), Reporter: logReporter{log: logr.Discard()}, Now: time.Now, Log: logr.Discard(),
	}
	p := protocol.NewPlan("cp-1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply, ExternalEtcd: true}
	p.Files = []protocol.File{{Path: "/etc/app.conf", Content: []byte("new\n")}}
	died := make(chan struct{})
	go func() {
		defer close(died)
		_, _ = x.Start(context.Background(), p)
	}()
	<-died

	e, err := jr.Load()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.InFlight).To(Equal("kubeadm-upgrade"))
	g.Expect(readHost(t, cp.root, kube.KubeadmBinary)).To(Equal(newKubeadm))
	g.Expect(readHost(t, cp.root, kube.KubeletBinary)).To(Equal(oldKubelet), "the kubelet is installed after kubeadm upgrade")
	g.Expect(readHost(t, cp.root, "/etc/app.conf")).To(Equal("new\n"))
	g.Expect(filepath.Join(cp.root, kube.RescueManifest)).To(BeAnExistingFile(), "the rescue pod was armed before the update changed the node's boot")
	return cp
}

// rescueNode is the node as the rescue pod sees it after the reboot, running
// commands through runner.
func (cp *controlPlane) rescueNode(runner backend.Runner) rescueNode {
	return rescueNode{
		Host:     &kube.Host{Root: cp.root, Runner: runner, Etcd: etcd.KubeadmLocal(cp.root)},
		Backends: map[string]backend.Backend{none.Name: none.New()},
		Rebooter: fixedBoot("boot-2"),
	}
}

func (cp *controlPlane) entry(t *testing.T) (journal.Entry, state.State) {
	t.Helper()
	e, err := cp.journal.Load()
	if err != nil {
		t.Fatal(err)
	}
	st, err := executor.StateOf(e)
	if err != nil {
		t.Fatal(err)
	}
	return e, st
}

var quickRescue = RescueOptions{APIServerDeadline: 300 * time.Millisecond, probeInterval: 20 * time.Millisecond}

// TestRescueLeavesAServingNodeToTheAgent: after the reboot the new API server
// answers ready: the rescue changes nothing, gives the journal up to the agent
// and keeps running (a container that exited 0 would not run after the next
// reboot), its pod in place for the rest of the update.
func TestRescueLeavesAServingNodeToTheAgent(t *testing.T) {
	g := NewWithT(t)
	var probes atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		_, _ = fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	cp := cutDuringKubeadm(t, port)
	before, _ := cp.entry(t)
	runner := (&backendtest.Runner{}).On("systemctl", "", nil)

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cp.rescueNode(runner).rescue(ctx, RescueOptions{APIServerDeadline: time.Hour}, logr.Discard())
	}()
	g.Eventually(probes.Load, 10*time.Second, 10*time.Millisecond).Should(BeNumerically(">", 0), "the rescue asks the API server")
	// The agent, started by the API server, gets the journal while the rescue pod runs.
	lockCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := journal.Lock(lockCtx, filepath.Join(cp.root, kube.WorkDir), nil)
	g.Expect(err).NotTo(HaveOccurred(), "the rescue gave the journal up")
	release()
	g.Consistently(done, 200*time.Millisecond).ShouldNot(Receive(), "the rescue stands by")

	after, _ := cp.entry(t)
	g.Expect(after).To(Equal(before), "the journal is untouched")
	g.Expect(readHost(t, cp.root, kube.APIServerManifest)).To(Equal(apiServerManifest(port, ", --bad-flag")))
	g.Expect(readHost(t, cp.root, kube.KubeadmBinary)).To(Equal(newKubeadm))
	g.Expect(filepath.Join(cp.root, kube.RescueManifest)).To(BeAnExistingFile())
	g.Expect(runner.Calls()).To(BeEmpty())

	stop()
	g.Eventually(done, 10*time.Second).Should(Receive(MatchError(errStoodBy)), "stopped while standing by: not a success, so the kubelet starts it after a reboot")
}

// TestRescueRollsBackAnAPIServerThatDoesNotComeBack: after the reboot nothing
// answers on the new API server's port by the deadline: the rescue fails the
// kubeadm upgrade in flight and rolls the node back from the journal, with no
// API server: the manifests, binaries and files as before the update, the
// kubelet restarted, the journal RolledBack, its own pod removed. The agent,
// started by the old API server, finds the update over and runs nothing again.
func TestRescueRollsBackAnAPIServerThatDoesNotComeBack(t *testing.T) {
	g := NewWithT(t)
	cp := cutDuringKubeadm(t, freePort(t))
	runner := (&backendtest.Runner{}).On("systemctl", "", nil)
	g.Expect(cp.rescueNode(runner).rescue(context.Background(), quickRescue, logr.Discard())).To(Succeed())

	g.Expect(readHost(t, cp.root, kube.APIServerManifest)).To(Equal(apiServerManifest(cp.oldPort, "")))
	g.Expect(readHost(t, cp.root, kube.KubeletBinary)).To(Equal(oldKubelet))
	g.Expect(readHost(t, cp.root, kube.KubeadmBinary)).To(Equal(oldKubeadm))
	g.Expect(filepath.Join(cp.root, "etc/app.conf")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(cp.root, kube.RescueManifest)).NotTo(BeAnExistingFile())
	g.Expect(runner.Calls()).To(Equal([]string{"systemctl daemon-reload", "systemctl restart kubelet"}))
	e, st := cp.entry(t)
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(e.InFlight).To(BeEmpty())
	g.Expect(e.Runs).To(Equal(map[string]int{"backup-files": 1, "write-files": 1, "install-kubeadm": 1, "kubeadm-upgrade": 1,
		"rollback/restore-files": 1, "rollback/restart-kubelet": 1}))
	status := st.Status()
	g.Expect(status.Reason).To(Equal(state.ReasonAPIServerNotBack))
	g.Expect(status.Action).To(Equal("kubeadm-upgrade"))
	g.Expect(status.Message).To(ContainSubstring("the node's own API server was not ready within 300ms"))

	// The agent, back with the old API server, resumes from the journal.
	agentRunner := &backendtest.Runner{}
	x := &executor.Executor{Journal: cp.journal, Kube: &kube.Host{Root: cp.root, Runner: agentRunner}, Gates: noGates{},
		Backends: lookupBackend(withNone(nil)), Rebooter: fixedBoot("boot-2"), Reporter: logReporter{log: logr.Discard()}, Now: time.Now, Log: logr.Discard()}
	again, err := x.Resume(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(agentRunner.Calls()).To(BeEmpty())
	after, _ := cp.entry(t)
	g.Expect(after.Runs).To(Equal(e.Runs))
}

// dying is a runner whose first command matching prefix ends its caller's
// goroutine (the rescue pod loses power, or is killed, while it runs).
type dying struct {
	*backendtest.Runner
	prefix string
	mu     sync.Mutex
	died   bool
}

func (d *dying) Run(ctx context.Context, c backend.Command) (backend.Result, error) {
	d.mu.Lock()
	die := !d.died && strings.HasPrefix(c.String(), d.prefix)
	d.died = d.died || die
	d.mu.Unlock()
	if die {
		runtime.Goexit()
	}
	return d.Runner.Run(ctx, c)
}

// TestRescueKilledMidRollbackFinishesIt: a rescue that dies during the rollback
// (a second power cut) leaves its pod and the journal's rollback in flight; the
// next run (the kubelet starts it again) finishes the rollback without probing
// again: the action in flight is repeated, none done is run again.
func TestRescueKilledMidRollbackFinishesIt(t *testing.T) {
	g := NewWithT(t)
	cp := cutDuringKubeadm(t, freePort(t))
	runner := (&backendtest.Runner{}).On("systemctl", "", nil)
	died := make(chan struct{})
	go func() {
		defer close(died)
		_ = cp.rescueNode(&dying{Runner: runner, prefix: "systemctl restart kubelet"}).rescue(context.Background(), quickRescue, logr.Discard())
	}()
	<-died
	e, st := cp.entry(t)
	g.Expect(st.Phase).To(Equal(protocol.PhaseRollingBack))
	g.Expect(e.InFlight).To(Equal("rollback/restart-kubelet"))
	g.Expect(readHost(t, cp.root, kube.APIServerManifest)).To(Equal(apiServerManifest(cp.oldPort, "")), "restored before the cut")
	g.Expect(filepath.Join(cp.root, kube.RescueManifest)).To(BeAnExistingFile(), "the rescue pod outlives the cut")

	// Run again with an hour's deadline: a rollback in flight does not wait for the API server.
	g.Expect(cp.rescueNode(runner).rescue(context.Background(), RescueOptions{APIServerDeadline: time.Hour}, logr.Discard())).To(Succeed())
	e, st = cp.entry(t)
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(e.Runs).To(Equal(map[string]int{"backup-files": 1, "write-files": 1, "install-kubeadm": 1, "kubeadm-upgrade": 1,
		"rollback/restore-files": 1, "rollback/restart-kubelet": 2}))
	g.Expect(runner.Calls()).To(Equal([]string{"systemctl daemon-reload", "systemctl daemon-reload", "systemctl restart kubelet"}),
		"the restart the cut interrupted ran once, after it")
	g.Expect(readHost(t, cp.root, kube.KubeadmBinary)).To(Equal(oldKubeadm))
	g.Expect(filepath.Join(cp.root, kube.RescueManifest)).NotTo(BeAnExistingFile())
}

// restoreInFlight lays out under a temporary root what a power cut during a
// rollback's etcd restore leaves once the data was restored: etcd's and the API
// server's manifests parked in the attempt's directory, the rescue pod in the
// manifest directory, and a journal rolling back a failed minor upgrade with the
// restore in flight.
func restoreInFlight(t *testing.T) (root string) {
	t.Helper()
	root = t.TempDir()
	attempt := filepath.Join(kube.AttemptsDir, "a1")
	for p, content := range map[string]string{
		filepath.Join(attempt, "etcd-members.json"):   `{"members":[{"Name":"cp-1"}]}`,
		filepath.Join(attempt, "etcd-restored"):       "2026-12-06T12:00:00Z\n",
		filepath.Join(attempt, "etcd.yaml"):           "etcd manifest\n",
		filepath.Join(attempt, "kube-apiserver.yaml"): "kube-apiserver manifest\n",
		kube.RescueManifest:                           "rescue pod\n",
	} {
		writeHost(t, root, p, content)
	}
	p := protocol.NewPlan("cp-1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply}
	raw, err := protocol.EncodePlan(p)
	if err != nil {
		t.Fatal(err)
	}
	st, out, err := state.Step(state.State{}, state.PlanObserved{Hash: "h1", Spec: state.SpecFor(p, none.New().Capabilities())})
	for err == nil && out.Next != nil && out.Next.Name != state.ActGates {
		st, out, err = state.Step(st, state.ActionSucceeded{Name: out.Next.Name, EtcdMembers: 1})
	}
	if err == nil {
		st, out, err = state.Step(st, state.ActionFailed{Name: state.ActGates, Reason: state.ReasonGateFailed, Message: "node not Ready"})
	}
	if err == nil {
		st, out, err = state.Step(st, state.ActionSucceeded{Name: state.ActRestoreFiles})
	}
	if err != nil || out.Next == nil || out.Next.Name != state.ActRestoreEtcd {
		t.Fatalf("no restore in flight: %v, %+v", err, out)
	}
	jr, err := journal.NewFile(filepath.Join(root, kube.WorkDir))
	if err != nil {
		t.Fatal(err)
	}
	rawState, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	e := journal.Entry{Key: "h1", Plan: raw, State: rawState, Attempt: "a1"}
	e.Begin(out.Next.Key())
	if err := jr.Save(e); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRescueFinishesTheRestoreInFlight: with the journal's etcd restore in
// flight, the rescue puts etcd's and the API server's manifests back, finishes
// the rollback and removes its own pod.
func TestRescueFinishesTheRestoreInFlight(t *testing.T) {
	g := NewWithT(t)
	root := restoreInFlight(t)
	runner := (&backendtest.Runner{}).On("systemctl", "", nil)
	cp := &controlPlane{root: root}
	g.Expect(cp.rescueNode(runner).rescue(context.Background(), RescueOptions{APIServerDeadline: time.Hour}, logr.Discard())).To(Succeed())
	g.Expect(readHost(t, root, kube.EtcdManifest)).To(Equal("etcd manifest\n"))
	g.Expect(readHost(t, root, kube.APIServerManifest)).To(Equal("kube-apiserver manifest\n"))
	g.Expect(filepath.Join(root, kube.RescueManifest)).NotTo(BeAnExistingFile())
	jr, _ := journal.NewFile(filepath.Join(root, kube.WorkDir))
	cp.journal = jr
	e, st := cp.entry(t)
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.Status().EtcdData).To(Equal(protocol.EtcdDataRestored))
	g.Expect(e.Runs).To(HaveKeyWithValue("rollback/restore-etcd", 2), "the run the cut interrupted, and the rescue's")
	g.Expect(runner.Calls()).To(Equal([]string{"systemctl daemon-reload", "systemctl restart kubelet"}))
}

// TestRescueWithNothingInFlight: a journal with no update that needs the rescue
// (none, or a finished one) is left as it is; the rescue only removes its pod.
func TestRescueWithNothingInFlight(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	writeHost(t, root, kube.RescueManifest, "rescue pod\n")
	runner := &backendtest.Runner{}
	cp := &controlPlane{root: root}
	g.Expect(cp.rescueNode(runner).rescue(context.Background(), RescueOptions{APIServerDeadline: time.Hour}, logr.Discard())).To(Succeed())
	g.Expect(filepath.Join(root, kube.RescueManifest)).NotTo(BeAnExistingFile())
	g.Expect(runner.Calls()).To(BeEmpty())
}

// TestRescueWaitsForALiveAgent: while another process (a live agent) holds the
// journal's lock, the rescue touches nothing.
func TestRescueWaitsForALiveAgent(t *testing.T) {
	g := NewWithT(t)
	root := restoreInFlight(t)
	release, err := journal.Lock(context.Background(), filepath.Join(root, kube.WorkDir), nil)
	g.Expect(err).NotTo(HaveOccurred())
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cp := &controlPlane{root: root}
	err = cp.rescueNode(&backendtest.Runner{}).rescue(ctx, RescueOptions{APIServerDeadline: time.Hour}, logr.Discard())
	g.Expect(errors.Is(err, context.DeadlineExceeded)).To(BeTrue(), "Rescue while the agent holds the journal: %v, want the context's deadline", err)
	g.Expect(exists(t, filepath.Join(root, kube.EtcdManifest))).To(BeFalse(), "the rescue acted while the agent held the journal")
	g.Expect(exists(t, filepath.Join(root, kube.RescueManifest))).To(BeTrue())
}
