package executor

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestBootedImageIsNotRebooted: a plan whose OS image is the one the node already
// runs (an OS-mapped change whose image the node booted earlier, e.g. a files change
// of a pool that also names its image) applies the Kubernetes part without staging,
// activating or rebooting: the host boots once, not twice. Today's code rebooted
// every OS-mapped plan.
func TestBootedImageIsNotRebooted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	p := workerPlan(true)
	p.OS = &protocol.OSImage{Backend: "simulated", Ref: simulated.InitialRef, Digest: simulated.DigestOf([]byte(simulated.InitialRef))}
	before, err := f.reboots.sim.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())

	st, err := f.x.Start(context.Background(), p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(f.reboots.boot).To(BeZero(), "no reboot")
	after, _ := f.reboots.sim.Status(context.Background())
	g.Expect(after).To(Equal(before), "the image store is untouched")
	runs, _ := f.x.Runs()
	for _, a := range []string{"backend-stage", "backend-activate", "reboot", "backend-verify", "backend-commit"} {
		g.Expect(runs).NotTo(HaveKey(a))
	}
	g.Expect(runs).To(HaveKeyWithValue("write-files", 1), "the Kubernetes part still runs")

	// The contrast: another image is staged and booted.
	f2 := newFixture(t, nil)
	st, err = f2.x.Start(context.Background(), workerPlan(true))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseCommitted))
	g.Expect(f2.reboots.boot).To(Equal(1))
}

// TestRollbackIntoTheRunningImageIsNotRebooted: the new image never comes up and
// the node falls back to the old slot by itself (GRUB's boot counting); the agent
// resumes there, its verify fails, and the rollback, which finds the old image
// running and booting next, records its reboot done without rebooting: one boot,
// not two. Today's code rebooted into the slot that already ran.
func TestRollbackIntoTheRunningImageIsNotRebooted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.reboots.fallBack = 1
	st, err := f.x.Start(context.Background(), workerPlan(true))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(st.FailedAction).To(Equal(state.ActBackendVerify))
	g.Expect(f.reboots.boot).To(Equal(1), "the forward reboot only")
	g.Expect(st.Rollback).To(Equal([]state.Action{
		{Name: state.ActBackendRollback, Rollback: true, Done: true},
		{Name: state.ActReboot, Rollback: true, Done: true, Skipped: true},
		{Name: state.ActVerifyRollback, Rollback: true, Done: true},
	}))
	runs, _ := f.x.Runs()
	g.Expect(runs).To(HaveKeyWithValue("rollback/backend-rollback", 1))
	g.Expect(runs).NotTo(HaveKey("rollback/reboot"), "no reboot was begun")
	status, _ := f.reboots.sim.Status(context.Background())
	g.Expect(status).To(Equal(backend.Status{Booted: simulated.DigestOf([]byte(simulated.InitialRef))}), "the old image runs and boots next")
	g.Expect(f.runner.Calls()).To(BeEmpty(), "no Kubernetes action ran, so no kubelet restart either")
	last := f.reports.last()
	g.Expect(last.Phase).To(Equal(protocol.PhaseRolledBack))
	g.Expect(last.Message).To(HaveSuffix("; not rebooted: the node already ran the image it ran before the update"))
}

// TestRollbackAfterAFallBackRestartsTheKubelet: the new image booted and the
// Kubernetes part ran on it, then the node lost power during the image's trial
// and came back on the old slot; the commit fails and the rollback restores the
// files. Without plan files it skips the reboot into the old image and restarts
// the kubelet in its place (once, even when the agent dies right after the skip
// was journaled); with plan files, which a service may have read at that boot, it
// reboots as before.
func TestRollbackAfterAFallBackRestartsTheKubelet(t *testing.T) {
	tests := []struct {
		name          string
		files         bool
		wantBoots     int
		wantRollback  []string
		wantRestarts  int
		wantNoRunsKey string
	}{
		{"no plan files: no reboot, a kubelet restart", false, 2,
			[]string{"backend-rollback", "restore-files", "reboot (skipped)", "restart-kubelet", "verify-rollback"}, 2, "rollback/reboot"},
		{"plan files: a reboot", true, 3,
			[]string{"backend-rollback", "restore-files", "reboot", "verify-rollback"}, 1, "rollback/restart-kubelet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			p := workerPlan(true)
			if !tt.files {
				p.Files = nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			f.x.Journal = &crashAt{Journal: f.journal, action: "gates", cancel: cancel}
			_, err := f.x.Start(ctx, p)
			g.Expect(err).To(MatchError(context.Canceled))
			// The power cut in the trial: the bootloader boots the old slot.
			f.reboots.boot++
			g.Expect(f.reboots.sim.FallBack()).To(Succeed())

			// The agent dies again right after the rollback's reboot was decided.
			ctx, cancel = context.WithCancel(context.Background())
			f.x.Journal = &crashAt{Journal: f.journal, action: "rollback/restart-kubelet", cancel: cancel}
			st, err := f.x.Resume(ctx)
			if tt.files {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(context.Canceled))
				st, err = f.x.Resume(context.Background())
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
			g.Expect(st.FailedAction).To(Equal(state.ActBackendCommit))
			g.Expect(f.reboots.boot).To(Equal(tt.wantBoots))
			var got []string
			for _, a := range st.Rollback {
				g.Expect(a.Done).To(BeTrue(), a.Key())
				name := string(a.Name)
				if a.Skipped {
					name += " (skipped)"
				}
				got = append(got, name)
			}
			g.Expect(got).To(Equal(tt.wantRollback))
			runs, _ := f.x.Runs()
			g.Expect(runs).NotTo(HaveKey(tt.wantNoRunsKey))
			for k, v := range runs {
				g.Expect(v).To(Equal(1), k)
			}
			restarts := 0
			for _, c := range f.runner.Calls() {
				if c == "systemctl restart kubelet" {
					restarts++
				}
			}
			g.Expect(restarts).To(Equal(tt.wantRestarts), "the forward restart, and the rollback's in place of a reboot")
		})
	}
}

// rollbackNotTaken is an OS backend whose rollback reports success and changes
// nothing: a bootloader that did not take it (a stale environment, a write the
// firmware lost).
type rollbackNotTaken struct{ backend.Backend }

func (rollbackNotTaken) Rollback(context.Context, backend.Artifact) error { return nil }

// TestRollbackThatDidNotTakeIsNotRolledBack: the gates fail on the new image and
// the rollback restores the files and reboots, but the node comes back on the
// plan's image: it is not rolled back (on ostree and bootc kubeadm and the
// kubelet come only with the image), so the agent reports the rollback failed
// and the node left for a human, never RolledBack.
func TestRollbackThatDidNotTakeIsNotRolledBack(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, errors.New("kubelet-version: kubelet reports v1.35.0"))
	sim := f.reboots.sim
	f.x.Backends = func(string) (backend.Backend, error) { return rollbackNotTaken{sim}, nil }
	before, err := sim.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())

	st, err := f.x.Start(context.Background(), workerPlan(true))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.reboots.boot).To(Equal(2), "the forward reboot and the rollback's")
	after, err := sim.Status(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after.Booted).NotTo(Equal(before.Booted), "the plan's image still runs")

	g.Expect(st.Phase).To(Equal(protocol.PhaseFailed))
	g.Expect(st.Status().Reason).To(Equal(protocol.ReasonRollbackFailed))
	g.Expect(st.Status().Broken()).To(BeTrue(), "the node needs a human")
	runs, _ := f.x.Runs()
	g.Expect(runs).To(HaveKeyWithValue("rollback/verify-rollback", state.RollbackAttempts))
	g.Expect(f.reports.last().Phase).To(Equal(protocol.PhaseFailed))
}
