package state

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var (
	abCaps = backend.Capabilities{CanStage: true, NeedsReboot: true, SupportsRollback: true, HasMarkGood: true, VerifiesDigest: true}
	// cpFull is a control-plane plan that touches everything.
	cpFull = Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeApply, Version: "v1.36.0", Files: true, KubeletArgs: true, OS: true, Caps: abCaps}
	// workerK8s is a Kubernetes-only worker upgrade (backend none).
	workerK8s = Spec{Kubeadm: protocol.KubeadmUpgradeNode, Version: "v1.36.0"}
)

func names(as []Action) []ActionName {
	out := make([]ActionName, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}

func TestDerive(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want []ActionName
	}{
		{"control plane, everything, A/B image with reboot", cpFull, []ActionName{
			ActEtcdSnapshot, ActBackendStage, ActBackendActivate, ActReboot, ActBackendVerify,
			ActBackupFiles, ActWriteFiles, ActKubeletConfig, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet,
			ActGates, ActBackendCommit}},
		{"control plane, upgrade with delivered binaries, A/B image: static pods before the image boots",
			withBinaries(cpFull), []ActionName{
				ActEtcdSnapshot, ActBackendStage,
				ActBackupFiles, ActWriteFiles, ActKubeletConfig, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet,
				ActBackendActivate, ActReboot, ActBackendVerify,
				ActGates, ActBackendCommit}},
		{"control plane, upgrade with delivered binaries, image applied live: image first",
			Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeApply, OS: true, BinariesDelivered: true, Caps: backend.Capabilities{SupportsRollback: true}},
			[]ActionName{ActEtcdSnapshot, ActBackendStage, ActBackendActivate, ActBackendVerify, ActBackupFiles, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet, ActGates, ActBackendCommit}},
		{"worker, upgrade with delivered binaries, A/B image: image first (the control plane is done)",
			Spec{Kubeadm: protocol.KubeadmUpgradeNode, OS: true, BinariesDelivered: true, Caps: cpFull.Caps},
			[]ActionName{ActBackendStage, ActBackendActivate, ActReboot, ActBackendVerify, ActBackupFiles, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet, ActGates, ActBackendCommit}},
		{"worker, Kubernetes only", workerK8s, []ActionName{ActBackupFiles, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet, ActGates}},
		{"worker, files only", Spec{Kubeadm: protocol.KubeadmNone, Files: true}, []ActionName{ActBackupFiles, ActWriteFiles, ActGates}},
		{"control plane, files only, no snapshot asked", Spec{ControlPlane: true, Kubeadm: protocol.KubeadmNone, Files: true}, []ActionName{ActBackupFiles, ActWriteFiles, ActGates}},
		{"control plane, files only, snapshot asked", Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, Files: true}, []ActionName{ActEtcdSnapshot, ActBackupFiles, ActWriteFiles, ActGates}},
		{"worker, snapshot flag ignored (no etcd on workers)", Spec{EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, Files: true}, []ActionName{ActBackupFiles, ActWriteFiles, ActGates}},
		{"OS live-applied, no reboot", Spec{Kubeadm: protocol.KubeadmNone, OS: true, Caps: backend.Capabilities{SupportsRollback: true}}, []ActionName{ActBackendStage, ActBackendActivate, ActBackendVerify, ActGates, ActBackendCommit}},
		{"kubelet args only", Spec{Kubeadm: protocol.KubeadmNone, KubeletArgs: true}, []ActionName{ActBackupFiles, ActKubeletConfig, ActRestartKubelet, ActGates}},
		{"control plane, component config changed, same version", Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true},
			[]ActionName{ActEtcdSnapshot, ActBackupFiles, ActControlPlaneConfig, ActGates}},
		{"control plane, component config changed with an upgrade: kubeadm upgrade covers it", Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeNode, ControlPlaneConfig: true},
			[]ActionName{ActEtcdSnapshot, ActBackupFiles, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet, ActGates}},
		{"control plane of an external etcd, upgrade: no member to snapshot", Spec{ControlPlane: true, ExternalEtcd: true, Kubeadm: protocol.KubeadmUpgradeApply, OS: true, Caps: backend.Capabilities{SupportsRollback: true}},
			[]ActionName{ActBackendStage, ActBackendActivate, ActBackendVerify, ActBackupFiles, ActInstallKubeadm, ActKubeadmUpgrade, ActInstallKubelet, ActRestartKubelet, ActGates, ActBackendCommit}},
		{"worker ignores component config", Spec{Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true}, []ActionName{ActGates}},
		{"users and NTP", Spec{Kubeadm: protocol.KubeadmNone, Users: true, NTP: true}, []ActionName{ActBackupFiles, ActApplyUsers, ActApplyNTP, ActGates}},
		{"nothing to change still gates", Spec{Kubeadm: protocol.KubeadmNone}, []ActionName{ActGates}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(names(Derive(tt.spec))).To(Equal(tt.want))
		})
	}
}

func withBinaries(s Spec) Spec {
	s.BinariesDelivered = true
	return s
}

// done marks the first n actions of Derive(s) done.
func done(s Spec, n int) []Action {
	as := Derive(s)
	for i := 0; i < n; i++ {
		as[i].Done = true
	}
	return as
}

func indexOf(as []Action, n ActionName) int {
	for i, a := range as {
		if a.Name == n {
			return i
		}
	}
	return -1
}

func TestDeriveRollback(t *testing.T) {
	full := Derive(cpFull)
	tests := []struct {
		name   string
		spec   Spec
		failed ActionName
		want   []ActionName
	}{
		{"snapshot fails: nothing changed", cpFull, ActEtcdSnapshot, []ActionName{}},
		{"stage fails: backend rollback only", cpFull, ActBackendStage, []ActionName{ActBackendRollback}},
		{"reboot command fails: no reboot to undo", cpFull, ActReboot, []ActionName{ActBackendRollback}},
		{"verify fails after reboot: rollback, reboot back, check the old image runs", cpFull, ActBackendVerify, []ActionName{ActBackendRollback, ActReboot, ActVerifyRollback}},
		{"backup fails after reboot", cpFull, ActBackupFiles, []ActionName{ActBackendRollback, ActReboot, ActVerifyRollback}},
		{"kubeadm upgrade fails on control plane: everything", cpFull, ActKubeadmUpgrade, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActReboot, ActVerifyRollback}},
		{"gates fail on control plane: everything, image first (read-only /usr comes back with it)", cpFull, ActGates, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActReboot, ActVerifyRollback}},
		{"commit fails", cpFull, ActBackendCommit, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActReboot, ActVerifyRollback}},
		{"static pods first, kubeadm upgrade fails: image staged only, files, etcd, kubelet restart (no reboot happened)",
			withBinaries(cpFull), ActKubeadmUpgrade, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActRestartKubelet}},
		{"static pods first, gates fail after booting the image: everything and reboot back",
			withBinaries(cpFull), ActGates, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActReboot, ActVerifyRollback}},
		{"worker gates fail: files, kubelet restart", workerK8s, ActGates, []ActionName{ActRestoreFiles, ActRestartKubelet}},
		{"worker kubeadm install fails: kubeadm restored, the running kubelet left alone", workerK8s, ActInstallKubeadm, []ActionName{ActRestoreFiles}},
		{"worker kubelet install fails: restore, restart", workerK8s, ActInstallKubelet, []ActionName{ActRestoreFiles, ActRestartKubelet}},
		{"worker write-files fails: restore, restart", Spec{Kubeadm: protocol.KubeadmNone, Files: true}, ActWriteFiles, []ActionName{ActRestoreFiles, ActRestartKubelet}},
		{"control-plane-config fails: files and etcd", Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true}, ActControlPlaneConfig, []ActionName{ActRestoreFiles, ActRestoreEtcd}},
		{"apply-users fails: restore passwd and friends", Spec{Kubeadm: protocol.KubeadmNone, Users: true, NTP: true}, ActApplyUsers, []ActionName{ActRestoreFiles}},
		{"worker backup fails: nothing changed", workerK8s, ActBackupFiles, []ActionName{}},
		{"live OS change (packages), gates fail: files first, then the OS (last in, first out)",
			Spec{Kubeadm: protocol.KubeadmUpgradeNode, Version: "v1.36.0", Files: true, OS: true, Caps: backend.Capabilities{CanStage: true, SupportsRollback: true}},
			ActGates, []ActionName{ActRestoreFiles, ActBackendRollback, ActRestartKubelet}},
	}
	// What a three-member control plane gets: never an etcd restore (split brain).
	multi := []struct {
		name    string
		spec    Spec
		failed  ActionName
		members int
		want    []ActionName
	}{
		{"three members, gates fail: image, files, reboot; no etcd restore", cpFull, ActGates, 3, []ActionName{ActBackendRollback, ActRestoreFiles, ActReboot, ActVerifyRollback}},
		{"three members, control-plane-config fails: files only", Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true}, ActControlPlaneConfig, 3, []ActionName{ActRestoreFiles}},
		{"member count unknown: no etcd restore", cpFull, ActKubeadmUpgrade, 0, []ActionName{ActBackendRollback, ActRestoreFiles, ActReboot, ActVerifyRollback}},
		{"one member: restore", cpFull, ActKubeadmUpgrade, 1, []ActionName{ActBackendRollback, ActRestoreFiles, ActRestoreEtcd, ActReboot, ActVerifyRollback}},
		{"one member, configuration only, data kept: files only", Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true, KeepEtcd: true}, ActControlPlaneConfig, 1, []ActionName{ActRestoreFiles}},
		{"one member, upgrade, data kept (policy Never): no etcd restore", withKeepEtcd(cpFull), ActGates, 1, []ActionName{ActBackendRollback, ActRestoreFiles, ActReboot, ActVerifyRollback}},
		{"one member, kubeadm failed before changing anything (failed empty): no etcd restore", cpFull, "", 1, []ActionName{ActBackendRollback, ActRestoreFiles, ActReboot, ActVerifyRollback}},
	}
	for _, tt := range multi {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			upTo := tt.failed
			if upTo == "" {
				upTo = ActKubeadmUpgrade
			}
			fwd := done(tt.spec, indexOf(Derive(tt.spec), upTo))
			g.Expect(names(DeriveRollback(tt.spec, fwd, tt.failed, tt.members))).To(Equal(tt.want))
		})
	}
	_ = full
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			fwd := Derive(tt.spec)
			fwd = done(tt.spec, indexOf(fwd, tt.failed))
			rb := DeriveRollback(tt.spec, fwd, tt.failed, 1)
			g.Expect(names(rb)).To(Equal(tt.want))
			for _, a := range rb {
				g.Expect(a.Rollback).To(BeTrue())
			}
		})
	}
}

// TestRollbackOfBothBinariesAtOnce: a journal whose forward list installs
// kubeadm and the kubelet in one action (ActInstallBinaries, which Derive no
// longer emits) still rolls both back and restarts the kubelet.
func TestRollbackOfBothBinariesAtOnce(t *testing.T) {
	g := NewWithT(t)
	fwd := []Action{{Name: ActBackupFiles, Done: true}, {Name: ActInstallBinaries}, {Name: ActKubeadmUpgrade}, {Name: ActRestartKubelet}, {Name: ActGates}}
	g.Expect(names(DeriveRollback(workerK8s, fwd, ActInstallBinaries, 0))).To(Equal([]ActionName{ActRestoreFiles, ActRestartKubelet}))
}

// host is a scripted world for the state machine: it performs actions (counting
// runs), fails the ones listed, and reboots by changing the boot ID.
type host struct {
	// etcdMembers is what etcd-snapshot reports; 1 unless a test sets it.
	etcdMembers int
	boot        int
	runs        map[string]int
	order       []string
	failOn      map[string]string
}

func newHost() *host {
	return &host{etcdMembers: 1, boot: 1, runs: map[string]int{}, failOn: map[string]string{}}
}

func (h *host) bootID() string { return string(rune('a' + h.boot)) }

// perform returns the event for running a.
func (h *host) perform(a Action) Event {
	h.runs[a.Key()]++
	h.order = append(h.order, a.Key())
	if msg, ok := h.failOn[a.Key()]; ok {
		reason := ReasonActionFailed
		if a.Name == ActGates {
			reason = ReasonGateFailed
		}
		return ActionFailed{Name: a.Name, Reason: reason, Message: msg}
	}
	if a.Name == ActEtcdSnapshot {
		return ActionSucceeded{Name: a.Name, EtcdMembers: h.etcdMembers}
	}
	return ActionSucceeded{Name: a.Name}
}

// persist is what the journal does: a JSON round trip.
func persist(t *testing.T, s State) State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// drive runs the executor loop until terminal. crashAfter >= 0 simulates a crash
// (state reloaded from its persisted form, then Resumed) after that many actions.
// crashBeforeResult makes that crash happen after the action ran but before its
// result was recorded.
func drive(t *testing.T, h *host, s State, out Output, crashAfter int, crashBeforeResult bool) State {
	t.Helper()
	g := NewWithT(t)
	steps := 0
	for i := 0; i < 100; i++ {
		if out.AwaitBoot {
			h.boot++
			s = persist(t, s)
			var err error
			s, out, err = Step(s, Resumed{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
			continue
		}
		if out.Next == nil {
			return s
		}
		a := *out.Next
		if a.Name == ActReboot {
			h.runs[a.Key()]++
			h.order = append(h.order, a.Key())
			var err error
			s, out, err = Step(s, RebootIssued{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.AwaitBoot).To(BeTrue())
			steps++
			continue
		}
		ev := h.perform(a)
		steps++
		if steps == crashAfter && crashBeforeResult {
			// Crash: the result is lost; resume must repeat the same action.
			s = persist(t, s)
			var err error
			s, out, err = Step(s, Resumed{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Next).NotTo(BeNil())
			g.Expect(*out.Next).To(Equal(a))
			continue
		}
		var err error
		s, out, err = Step(s, ev)
		g.Expect(err).NotTo(HaveOccurred())
		if steps == crashAfter {
			s = persist(t, s)
			s, out, err = Step(s, Resumed{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	t.Fatal("no terminal state after 100 steps")
	return s
}

func start(t *testing.T, spec Spec) (State, Output) {
	t.Helper()
	s, out, err := Step(State{}, PlanObserved{Hash: "h1", DesiredState: "d1", Spec: spec, At: time.Unix(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return s, out
}

func TestHappyPath(t *testing.T) {
	for _, spec := range []Spec{cpFull, workerK8s} {
		t.Run(string(spec.Kubeadm), func(t *testing.T) {
			g := NewWithT(t)
			h := newHost()
			s, out := start(t, spec)
			g.Expect(s.Phase).To(Equal(phaseOf(Derive(spec)[0].Name)))
			s = drive(t, h, s, out, -1, false)
			g.Expect(s.Phase).To(Equal(protocol.PhaseCommitted))
			for _, a := range Derive(spec) {
				g.Expect(h.runs[a.Key()]).To(Equal(1), "action %s", a.Name)
			}
			g.Expect(h.order).To(HaveLen(len(Derive(spec))))
			st := s.Status()
			g.Expect(st.Step).To(Equal(st.Steps))
			g.Expect(st.Message).To(ContainSubstring("committed: Kubernetes v1.36.0"))
			g.Expect(st.DesiredState).To(Equal("d1"), "a commit names the desired state it carried out")
			_, err := protocol.EncodeStatus(st)
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

func TestPhasesAlongTheWay(t *testing.T) {
	g := NewWithT(t)
	h := newHost()
	s, out := start(t, cpFull)
	var phases []protocol.Phase
	for out.Next != nil || out.AwaitBoot {
		phases = append(phases, s.Phase)
		if out.AwaitBoot {
			h.boot++
			s, out, _ = Step(s, Resumed{BootID: h.bootID()})
			continue
		}
		if out.Next.Name == ActReboot {
			s, out, _ = Step(s, RebootIssued{BootID: h.bootID()})
			continue
		}
		s, out, _ = Step(s, h.perform(*out.Next))
	}
	phases = append(phases, s.Phase)
	g.Expect(phases).To(Equal([]protocol.Phase{
		protocol.PhaseStaging, protocol.PhaseStaging, protocol.PhaseApplying, protocol.PhaseRebooting, protocol.PhaseRebooting,
		protocol.PhaseApplying, protocol.PhaseApplying, protocol.PhaseApplying, protocol.PhaseApplying, protocol.PhaseApplying,
		protocol.PhaseApplying, protocol.PhaseApplying, protocol.PhaseApplying, protocol.PhaseVerifying, protocol.PhaseVerifying, protocol.PhaseCommitted,
	}))
}

// TestCrashBetweenAnyTwoActions: a crash after every possible number of finished
// actions resumes exactly: every action runs once.
func TestCrashBetweenAnyTwoActions(t *testing.T) {
	for _, spec := range []Spec{cpFull, workerK8s} {
		n := len(Derive(spec))
		for k := 0; k <= n; k++ {
			t.Run(string(spec.Kubeadm)+"/after-"+strconv.Itoa(k), func(t *testing.T) {
				g := NewWithT(t)
				h := newHost()
				s, out := start(t, spec)
				s = drive(t, h, s, out, k, false)
				g.Expect(s.Phase).To(Equal(protocol.PhaseCommitted))
				for _, a := range Derive(spec) {
					g.Expect(h.runs[a.Key()]).To(Equal(1), "action %s", a.Name)
				}
			})
		}
	}
}

// TestCrashDuringAction: a crash after an action ran but before its result was
// journaled repeats that action (actions are idempotent) and skips none.
func TestCrashDuringAction(t *testing.T) {
	spec := cpFull
	n := len(Derive(spec))
	for k := 1; k <= n; k++ {
		t.Run("during-"+string(Derive(spec)[k-1].Name), func(t *testing.T) {
			g := NewWithT(t)
			h := newHost()
			s, out := start(t, spec)
			s = drive(t, h, s, out, k, true)
			g.Expect(s.Phase).To(Equal(protocol.PhaseCommitted))
			for i, a := range Derive(spec) {
				want := 1
				if i == k-1 && a.Name != ActReboot {
					want = 2
				}
				g.Expect(h.runs[a.Key()]).To(Equal(want), "action %s", a.Name)
			}
		})
	}
}

func TestRebootWithoutNewBootIsReissued(t *testing.T) {
	g := NewWithT(t)
	s, out := start(t, cpFull)
	h := newHost()
	for out.Next != nil && out.Next.Name != ActReboot {
		s, out, _ = Step(s, h.perform(*out.Next))
	}
	s, out, err := Step(s, RebootIssued{BootID: "b1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.AwaitBoot).To(BeTrue())
	g.Expect(s.Phase).To(Equal(protocol.PhaseRebooting))
	// Crash before the reboot took effect: same boot ID, the reboot is asked again.
	s, out, err = Step(persist(t, s), Resumed{BootID: "b1"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next).NotTo(BeNil())
	g.Expect(out.Next.Name).To(Equal(ActReboot))
	s, _, _ = Step(s, RebootIssued{BootID: "b1"})
	s, out, err = Step(persist(t, s), Resumed{BootID: "b2"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next.Name).To(Equal(ActBackendVerify))
	g.Expect(s.RebootFrom).To(BeEmpty())
}

func TestFailedGateRollsBackOnceInOrder(t *testing.T) {
	for _, crash := range []int{-1, 13, 14, 15, 16, 17} {
		t.Run("crash-"+strconv.Itoa(crash), func(t *testing.T) {
			g := NewWithT(t)
			h := newHost()
			h.failOn["gates"] = "kubelet-version: kubelet reports v1.35.0, want v1.36.0"
			s, out := start(t, cpFull)
			s = drive(t, h, s, out, crash, false)
			g.Expect(s.Phase).To(Equal(protocol.PhaseRolledBack))
			g.Expect(h.order[indexOf(Derive(cpFull), ActGates):]).To(Equal([]string{
				"gates", "rollback/backend-rollback", "rollback/restore-files", "rollback/restore-etcd", "rollback/reboot", "rollback/verify-rollback",
			}))
			for k, v := range h.runs {
				g.Expect(v).To(Equal(1), "action %s", k)
			}
			g.Expect(h.runs).NotTo(HaveKey("backend-commit"))
			st := s.Status()
			g.Expect(st.Reason).To(Equal(ReasonGateFailed))
			g.Expect(st.Action).To(Equal("gates"))
			g.Expect(st.Message).To(Equal("rolled back because gates failed: kubelet-version: kubelet reports v1.35.0, want v1.36.0" +
				"; etcd was restored from its snapshot taken when the update started at 1970-01-01T00:01:40Z: every write to the cluster since then is lost"))
			g.Expect(st.EtcdData).To(Equal(protocol.EtcdDataRestored))
			g.Expect(st.Step).To(Equal(5))
			g.Expect(st.Steps).To(Equal(5))
		})
	}
}

func TestFailureDuringRollback(t *testing.T) {
	g := NewWithT(t)
	h := newHost()
	h.failOn["gates"] = "node not Ready"
	h.failOn["rollback/restore-etcd"] = "etcdutl: snapshot file missing"
	s, out := start(t, cpFull)
	s = drive(t, h, s, out, -1, false)
	g.Expect(s.Phase).To(Equal(protocol.PhaseFailed))
	g.Expect(h.runs).To(HaveKeyWithValue("rollback/backend-rollback", 1), "the image was rolled back first, before the failure")
	g.Expect(h.runs).NotTo(HaveKey("rollback/reboot"), "rollback stops at its first failure")
	st := s.Status()
	g.Expect(st.Reason).To(Equal(ReasonRollbackFailed))
	g.Expect(st.EtcdData).To(BeEmpty(), "a rollback that failed restored nothing for sure")
	g.Expect(st.Message).To(ContainSubstring("rollback action restore-etcd failed: etcdutl: snapshot file missing"))
	g.Expect(st.Message).To(ContainSubstring("gates failed: node not Ready"))
	// Terminal: no more actions, and further results are refused.
	_, out, err := Step(s, ActionSucceeded{Name: ActRestoreEtcd})
	g.Expect(errors.Is(err, ErrUnexpected)).To(BeTrue())
	g.Expect(out.Next).To(BeNil())
}

func TestFailureBeforeAnythingChanged(t *testing.T) {
	g := NewWithT(t)
	h := newHost()
	h.failOn["etcd-snapshot"] = "etcdctl: context deadline exceeded"
	s, out := start(t, cpFull)
	s = drive(t, h, s, out, -1, false)
	g.Expect(s.Phase).To(Equal(protocol.PhaseFailed))
	g.Expect(h.order).To(Equal([]string{"etcd-snapshot"}))
	st := s.Status()
	g.Expect(st.Reason).To(Equal(ReasonActionFailed))
	g.Expect(st.Message).To(Equal("failed before changing the node: etcd-snapshot failed: etcdctl: context deadline exceeded"))
}

func TestTransitions(t *testing.T) {
	running, _ := start(t, workerK8s)
	committed := running.clone()
	committed.Phase = protocol.PhaseCommitted
	for i := range committed.Actions {
		committed.Actions[i].Done = true
	}
	rejected, _, _ := Step(State{}, PlanRejected{Hash: "bad", Reason: ReasonInvalidPlan, Message: "decode: unexpected EOF"})
	tests := []struct {
		name      string
		from      State
		event     Event
		wantErr   error
		wantPhase protocol.Phase
		wantNext  ActionName
	}{
		{"observe a plan from empty", State{}, PlanObserved{Hash: "h1", Spec: workerK8s}, nil, protocol.PhaseApplying, ActBackupFiles},
		{"observe the same plan again is a no-op", running, PlanObserved{Hash: "h1", Spec: workerK8s}, nil, protocol.PhaseApplying, ActBackupFiles},
		{"observe another plan while busy", running, PlanObserved{Hash: "h2", Spec: workerK8s}, ErrBusy, protocol.PhaseApplying, ActBackupFiles},
		{"observe another plan after commit", committed, PlanObserved{Hash: "h2", Spec: workerK8s}, nil, protocol.PhaseApplying, ActBackupFiles},
		{"observe after a rejection", rejected, PlanObserved{Hash: "h2", Spec: workerK8s}, nil, protocol.PhaseApplying, ActBackupFiles},
		{"reject from empty", State{}, PlanRejected{Hash: "h9", Reason: ReasonUnknownBackend}, nil, protocol.PhaseFailed, ""},
		{"reject another plan while busy", running, PlanRejected{Hash: "h9", Reason: ReasonUnknownBackend}, ErrBusy, protocol.PhaseApplying, ActBackupFiles},
		{"reject the running plan", running, PlanRejected{Hash: "h1", Reason: ReasonUnknownBackend}, ErrUnexpected, protocol.PhaseApplying, ActBackupFiles},
		{"success of the current action", running, ActionSucceeded{Name: ActBackupFiles}, nil, protocol.PhaseApplying, ActInstallKubeadm},
		{"success of another action", running, ActionSucceeded{Name: ActGates}, ErrUnexpected, protocol.PhaseApplying, ActBackupFiles},
		{"failure of another action", running, ActionFailed{Name: ActGates}, ErrUnexpected, protocol.PhaseApplying, ActBackupFiles},
		{"failure of the first action", running, ActionFailed{Name: ActBackupFiles, Reason: ReasonActionFailed}, nil, protocol.PhaseFailed, ""},
		{"reboot issued when no reboot is due", running, RebootIssued{BootID: "x"}, ErrUnexpected, protocol.PhaseApplying, ActBackupFiles},
		{"resume without a reboot", running, Resumed{BootID: "x"}, nil, protocol.PhaseApplying, ActBackupFiles},
		{"resume committed", committed, Resumed{BootID: "x"}, nil, protocol.PhaseCommitted, ""},
		{"success after commit", committed, ActionSucceeded{Name: ActGates}, ErrUnexpected, protocol.PhaseCommitted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			before := persist(t, tt.from)
			got, out, err := Step(tt.from, tt.event)
			if tt.wantErr != nil {
				g.Expect(errors.Is(err, tt.wantErr)).To(BeTrue(), "error %v", err)
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(got.Phase).To(Equal(tt.wantPhase))
			if tt.wantNext == "" {
				g.Expect(out.Next).To(BeNil())
			} else {
				g.Expect(out.Next).NotTo(BeNil())
				g.Expect(out.Next.Name).To(Equal(tt.wantNext))
			}
			g.Expect(persist(t, tt.from)).To(Equal(before), "Step must not mutate its input")
		})
	}
}

func TestAdmit(t *testing.T) {
	plan := func(mut func(p *protocol.NodePlan)) *protocol.NodePlan {
		p := protocol.NewPlan("node-1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
		if mut != nil {
			mut(p)
		}
		return p
	}
	facts := Facts{NodeName: "node-1", KubeletVersion: "v1.35.2", Backends: []string{"none", "simulated"}}
	tests := []struct {
		name       string
		plan       *protocol.NodePlan
		facts      Facts
		wantReason string
		wantMsg    string
	}{
		{"minor upgrade", plan(nil), facts, "", ""},
		{"patch upgrade", plan(func(p *protocol.NodePlan) { p.Kubernetes.Version = "v1.35.3" }), facts, "", ""},
		{"same version, files only", plan(func(p *protocol.NodePlan) {
			p.Kubernetes.Version, p.Kubernetes.Action = "v1.35.2", protocol.KubeadmNone
		}), facts, "", ""},
		{"simulated OS backend", plan(func(p *protocol.NodePlan) {
			p.OS = &protocol.OSImage{Backend: "simulated", Ref: "sim:v2", Digest: "sha256:00"}
		}), facts, "", ""},
		{"another node", plan(func(p *protocol.NodePlan) { p.NodeName = "node-2" }), facts, ReasonPlanForAnotherNode, `the plan is for node "node-2", this is node "node-1"`},
		{"unknown backend", plan(func(p *protocol.NodePlan) {
			p.OS = &protocol.OSImage{Backend: "floppy", Ref: "x", Digest: "sha256:00"}
		}), facts, ReasonUnknownBackend, `backend "floppy", but this agent has only none, simulated`},
		{"backend none cannot switch images", plan(func(p *protocol.NodePlan) {
			p.OS = &protocol.OSImage{Backend: "none", Ref: "x", Digest: "sha256:00"}
		}), facts, ReasonUnknownBackend, `backend "none"`},
		{"two minors", plan(func(p *protocol.NodePlan) { p.Kubernetes.Version = "v1.37.0" }), facts, ReasonVersionUnreachable, "more than one minor version"},
		{"downgrade", plan(func(p *protocol.NodePlan) { p.Kubernetes.Version = "v1.35.1" }), facts, ReasonVersionUnreachable, "downgrades are not supported"},
		{"major", plan(func(p *protocol.NodePlan) { p.Kubernetes.Version = "v2.0.0" }), facts, ReasonVersionUnreachable, "more than one minor"},
		{"version change without kubeadm", plan(func(p *protocol.NodePlan) { p.Kubernetes.Action = protocol.KubeadmNone }), facts, ReasonVersionUnreachable, "runs no kubeadm upgrade"},
		{"no kubelet version", plan(nil), Facts{NodeName: "node-1"}, ReasonVersionUnreachable, "reports no kubelet version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := Admit(tt.plan, tt.facts)
			if tt.wantReason == "" {
				g.Expect(r).To(BeNil())
				return
			}
			g.Expect(r).NotTo(BeNil())
			g.Expect(r.Reason).To(Equal(tt.wantReason))
			g.Expect(r.Message).To(ContainSubstring(tt.wantMsg))
		})
	}
}

// TestThreeMemberRollbackNeverRestoresEtcd: the member count seen by the
// snapshot survives a crash (journal round trip) and keeps the etcd restore out of
// a control-plane rollback.
func TestThreeMemberRollbackNeverRestoresEtcd(t *testing.T) {
	g := NewWithT(t)
	h := newHost()
	h.etcdMembers = 3
	h.failOn["gates"] = "kube-apiserver not Ready"
	s, out := start(t, cpFull)
	s = drive(t, h, s, out, 1, false)
	g.Expect(s.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(s.EtcdMembers).To(Equal(3))
	g.Expect(h.runs).NotTo(HaveKey("rollback/restore-etcd"))
	g.Expect(h.runs).To(HaveKeyWithValue("rollback/restore-files", 1))
}

func withKeepEtcd(s Spec) Spec {
	s.KeepEtcd = true
	return s
}

// TestFailedGateIsJournaled: the gate that did not pass is part of the state, so
// the status names it after the agent restarted (the state read back from the
// journal) during the rollback and once it is over; a rollback that then fails
// reports RollbackFailed without it.
func TestFailedGateIsJournaled(t *testing.T) {
	g := NewWithT(t)
	s, _ := start(t, workerK8s)
	for _, a := range s.Actions {
		if a.Name == ActGates {
			break
		}
		var err error
		s, _, err = Step(s, ActionSucceeded{Name: a.Name})
		g.Expect(err).NotTo(HaveOccurred())
	}
	s, _, err := Step(s, ActionFailed{Name: ActGates, Reason: ReasonGateFailed, Gate: "lane-health", Message: "gate lane-health did not pass within 20s: exit status 1"})
	g.Expect(err).NotTo(HaveOccurred())
	s = persist(t, s)
	g.Expect(s.Phase).To(Equal(protocol.PhaseRollingBack))
	g.Expect(s.Status().Gate).To(Equal("lane-health"))

	failed := s
	for range RollbackAttempts {
		failed, _, err = Step(persist(t, failed), ActionFailed{Name: s.Rollback[0].Name, Reason: ReasonActionFailed, Message: "disk gone"})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(failed.Status().Reason).To(Equal(ReasonRollbackFailed))
	g.Expect(failed.Status().Gate).To(BeEmpty())

	for _, a := range s.Rollback {
		s, _, err = Step(persist(t, s), ActionSucceeded{Name: a.Name})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(s.Phase).To(Equal(protocol.PhaseRolledBack))
	st := s.Status()
	g.Expect(st.Reason).To(Equal(ReasonGateFailed))
	g.Expect(st.Gate).To(Equal("lane-health"))
}

// TestRollbackActionRunsAgain: a failed rollback action is the next action again,
// after a pause that grows, until it has failed RollbackAttempts times; then the
// node is Failed with RollbackFailed. A success in between clears the failure from
// the status, and the count survives the journal.
func TestRollbackActionRunsAgain(t *testing.T) {
	g := NewWithT(t)
	s, _ := start(t, workerK8s)
	s, _, err := Step(s, ActionSucceeded{Name: s.Actions[0].Name})
	g.Expect(err).NotTo(HaveOccurred())
	s, _, err = Step(s, ActionFailed{Name: s.Actions[1].Name, Reason: ReasonActionFailed, Message: "boom"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Phase).To(Equal(protocol.PhaseRollingBack))
	first := s.Rollback[0].Name

	for i := 1; i < RollbackAttempts; i++ {
		var out Output
		s, out, err = Step(persist(t, s), ActionFailed{Name: first, Reason: ReasonActionFailed, Message: "the kubelet still runs the pod"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(s.Phase).To(Equal(protocol.PhaseRollingBack), "run %d", i)
		g.Expect(out.Next).NotTo(BeNil())
		g.Expect(out.Next.Name).To(Equal(first))
		g.Expect(out.After).To(Equal(RollbackRetryDelay(i)))
		g.Expect(s.Status().Reason).To(Equal(ReasonActionFailed))
	}
	g.Expect(RollbackRetryDelay(2)).To(BeNumerically(">", RollbackRetryDelay(1)))

	recovered, out, err := Step(persist(t, s), ActionSucceeded{Name: first})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.After).To(BeZero())
	g.Expect(recovered.RollbackRetry).To(BeEmpty())
	g.Expect(recovered.Rollback[0].Failures).To(Equal(RollbackAttempts - 1))

	failed, out, err := Step(persist(t, s), ActionFailed{Name: first, Reason: ReasonActionFailed, Message: "the kubelet still runs the pod"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next).To(BeNil())
	g.Expect(failed.Phase).To(Equal(protocol.PhaseFailed))
	g.Expect(failed.Status().Reason).To(Equal(ReasonRollbackFailed))
	g.Expect(failed.Status().Broken()).To(BeTrue())
}
