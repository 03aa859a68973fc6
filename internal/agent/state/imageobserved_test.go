package state

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

var (
	// workerOS is an image switch of a worker with a Kubernetes upgrade: the
	// image boots first, then the Kubernetes part runs on it.
	workerOS = Spec{Kubeadm: protocol.KubeadmUpgradeNode, Version: "v1.36.0", OS: true, Caps: abCaps}
	// cpK8sFirst is a control plane that upgrades its static pods with delivered
	// binaries before it boots the new image, and writes no plan files.
	cpK8sFirst = withBinaries(Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeApply, Version: "v1.36.0", KubeletArgs: true, OS: true, Caps: abCaps})
)

// toRollbackReboot runs spec's plan, started on image before, through its
// forward reboot (the node comes back on a new boot, whichever slot the
// bootloader chose), fails failed and runs the rollback until its reboot is
// the next action.
func toRollbackReboot(t *testing.T, spec Spec, before string, failed ActionName) State {
	t.Helper()
	g := NewWithT(t)
	s, out, err := Step(State{}, PlanObserved{Hash: "h1", Spec: spec, ImageBefore: before, At: time.Unix(100, 0)})
	g.Expect(err).NotTo(HaveOccurred())
	h := newHost()
	h.failOn[string(failed)] = "the node runs another image"
	for i := 0; i < 100; i++ {
		g.Expect(out.Next).NotTo(BeNil(), "the plan ended %s before its rollback's reboot", s.Phase)
		a := *out.Next
		if a.Name == ActReboot && a.Rollback {
			return s
		}
		if a.Name == ActReboot {
			s, _, err = Step(s, RebootIssued{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
			h.boot++
			s, out, err = Step(persist(t, s), Resumed{BootID: h.bootID()})
			g.Expect(err).NotTo(HaveOccurred())
			continue
		}
		s, out, err = Step(s, h.perform(a))
		g.Expect(err).NotTo(HaveOccurred())
	}
	t.Fatal("no rollback reboot after 100 steps")
	return s
}

// rollbackKeys lists the rollback actions: "name", with "(done)" or
// "(skipped)" after those recorded done.
func rollbackKeys(s State) []string {
	out := make([]string, len(s.Rollback))
	for i, a := range s.Rollback {
		out[i] = string(a.Name)
		switch {
		case a.Skipped:
			out[i] += " (skipped)"
		case a.Done:
			out[i] += " (done)"
		}
	}
	return out
}

// TestImageObservedSkipsANeedlessRollbackReboot: a rollback whose reboot is due
// while the node runs, and boots next, the image it ran before the plan (GRUB
// fell back from a new slot that never came up) records the reboot done without
// issuing it, and restarts the kubelet instead when the restored files need it;
// it reboots as before when another image runs or boots next, when no image was
// recorded, and when the rollback restores what only a boot makes effective.
// Before ImageObserved, every such rollback rebooted into the running image.
func TestImageObservedSkipsANeedlessRollbackReboot(t *testing.T) {
	tests := []struct {
		name     string
		spec     Spec
		before   string
		failed   ActionName
		observed ImageObserved
		// wantRollback is the rollback list after the observation; wantNext the
		// action then due ("" when the rollback is over).
		wantRollback []string
		wantNext     string
	}{
		{"worker, GRUB fell back to the old slot: no reboot", workerOS, "slot-a", ActBackendVerify, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "reboot (skipped)", "verify-rollback"}, "rollback/verify-rollback"},
		{"the new image runs (its gates failed): reboot", workerOS, "slot-a", ActGates, ImageObserved{Booted: "slot-b", Staged: "slot-a"},
			[]string{"backend-rollback (done)", "restore-files (done)", "reboot", "verify-rollback"}, "rollback/reboot"},
		{"the old image runs, another boots next: reboot", workerOS, "slot-a", ActBackendVerify, ImageObserved{Booted: "slot-a", Staged: "slot-b"},
			[]string{"backend-rollback (done)", "reboot", "verify-rollback"}, "rollback/reboot"},
		{"no image recorded when the plan started (a journal from before, a backend that could not say): reboot", workerOS, "", ActBackendVerify, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "reboot", "verify-rollback"}, "rollback/reboot"},
		{"worker, the old slot booted after the Kubernetes part (a power cut in the trial): the kubelet restarts instead",
			workerOS, "slot-a", ActBackendCommit, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "restore-files (done)", "reboot (skipped)", "restart-kubelet", "verify-rollback"}, "rollback/restart-kubelet"},
		{"control plane, static pods upgraded before the image, GRUB fell back: files and etcd restored, the kubelet restarts instead",
			cpK8sFirst, "slot-a", ActBackendVerify, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "restore-files (done)", "restore-etcd (done)", "reboot (skipped)", "restart-kubelet", "verify-rollback"}, "rollback/restart-kubelet"},
		{"the plan's files were written before the boot (any service may have read them): reboot",
			withBinaries(cpFull), "slot-a", ActBackendVerify, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "restore-files (done)", "restore-etcd (done)", "reboot", "verify-rollback"}, "rollback/reboot"},
		{"the NTP client was restarted on the plan's servers: reboot",
			withBinaries(Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeApply, Version: "v1.36.0", NTP: true, OS: true, Caps: abCaps}), "slot-a", ActBackendVerify, ImageObserved{Booted: "slot-a"},
			[]string{"backend-rollback (done)", "restore-files (done)", "restore-etcd (done)", "reboot", "verify-rollback"}, "rollback/reboot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := toRollbackReboot(t, tt.spec, tt.before, tt.failed)
			before := persist(t, s)
			got, out, err := Step(s, tt.observed)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(persist(t, s)).To(Equal(before), "Step must not mutate its input")
			g.Expect(rollbackKeys(got)).To(Equal(tt.wantRollback))
			g.Expect(out.Next).NotTo(BeNil())
			g.Expect(out.Next.Key()).To(Equal(tt.wantNext))
			g.Expect(got.Phase).To(Equal(protocol.PhaseRollingBack))
			if tt.wantNext != "rollback/verify-rollback" {
				return
			}
			// The old image runs: the check passes and the rollback ends.
			got, out, err = Step(got, ActionSucceeded{Name: ActVerifyRollback})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out.Next).To(BeNil())
			g.Expect(got.Phase).To(Equal(protocol.PhaseRolledBack))
			g.Expect(got.Status().Message).To(HaveSuffix("; not rebooted: the node already ran the image it ran before the update"))
		})
	}
}

// TestSkippedRebootResumesExactly: the agent may die at any point around the
// skip. Before the skip is journaled the reboot is still due, and observing
// again skips it; after, a resumed agent runs the kubelet restart, once, and
// ends RolledBack with the skip in its journal.
func TestSkippedRebootResumesExactly(t *testing.T) {
	g := NewWithT(t)
	s := toRollbackReboot(t, cpK8sFirst, "slot-a", ActBackendVerify)

	// A crash before the observation was journaled: the same boot, the reboot
	// is due again, and so is the observation.
	s, out, err := Step(persist(t, s), Resumed{BootID: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next.Key()).To(Equal("rollback/reboot"))

	s, _, err = Step(s, ImageObserved{Booted: "slot-a"})
	g.Expect(err).NotTo(HaveOccurred())
	// A crash after: the skip and the kubelet restart in its place survive.
	s, out, err = Step(persist(t, s), Resumed{BootID: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next.Key()).To(Equal("rollback/restart-kubelet"))
	s, out, err = Step(s, ActionSucceeded{Name: ActRestartKubelet})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next.Key()).To(Equal("rollback/verify-rollback"))
	s, out, err = Step(persist(t, s), ActionSucceeded{Name: ActVerifyRollback})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Next).To(BeNil())
	g.Expect(s.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(rollbackKeys(s)).To(Equal([]string{"backend-rollback (done)", "restore-files (done)", "restore-etcd (done)", "reboot (skipped)", "restart-kubelet (done)", "verify-rollback (done)"}))
	st := s.Status()
	g.Expect(st.Step).To(Equal(6))
	g.Expect(st.Steps).To(Equal(6))

	// Once done, the observation is refused: no reboot is due.
	_, _, err = Step(s, ImageObserved{Booted: "slot-a"})
	g.Expect(errors.Is(err, ErrUnexpected)).To(BeTrue(), "error %v", err)
}

// TestImageObservedOnlyWhenARollbackRebootIsDue: the observation decides a
// rollback's reboot only, and only before it is issued; a forward reboot is
// never skipped here (a plan whose image already runs has none: the executor
// checks before the plan starts).
func TestImageObservedOnlyWhenARollbackRebootIsDue(t *testing.T) {
	forward, _, err := Step(State{}, PlanObserved{Hash: "h1", Spec: workerOS, ImageBefore: "slot-a"})
	if err != nil {
		t.Fatal(err)
	}
	for forward.current().Name != ActReboot {
		forward, _, _ = Step(forward, ActionSucceeded{Name: forward.current().Name})
	}
	rollingBack := toRollbackReboot(t, workerOS, "slot-a", ActBackendVerify)
	rollingBack.Rollback[0].Done = false
	issued, _, err := Step(toRollbackReboot(t, workerOS, "slot-a", ActBackendVerify), RebootIssued{BootID: "c"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		from State
	}{
		{"a forward reboot", forward},
		{"a rollback action before the reboot", rollingBack},
		{"a rollback reboot already issued", issued},
		{"no plan", State{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, _, err := Step(tt.from, ImageObserved{Booted: "slot-a"})
			g.Expect(errors.Is(err, ErrUnexpected)).To(BeTrue(), "error %v", err)
			g.Expect(persist(t, got)).To(Equal(persist(t, tt.from)))
		})
	}
}
