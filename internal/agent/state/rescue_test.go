package state

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// armedAlong walks spec's update with h (failures as h says) and returns, for
// every action the state ran, whether the rescue was wanted before it ran
// (the executor arms then), and whether it was wanted once the update ended.
func armedAlong(t *testing.T, h *host, spec Spec) (before map[string]bool, after bool, end protocol.Phase) {
	t.Helper()
	before = map[string]bool{}
	s, out := start(t, spec)
	for range 100 {
		if out.AwaitBoot {
			h.boot++
			s, out, _ = Step(persist(t, s), Resumed{BootID: h.bootID()})
			continue
		}
		if out.Next == nil {
			return before, s.RescueWanted(), s.Phase
		}
		a := *out.Next
		before[a.Key()] = s.RescueWanted()
		if a.Name == ActReboot {
			s, out, _ = Step(s, RebootIssued{BootID: h.bootID()})
			continue
		}
		s, out, _ = Step(s, h.perform(a))
	}
	t.Fatal("no terminal state after 100 steps")
	return nil, false, ""
}

// TestRescueWanted: a control plane has the rescue pod from before the first
// action that changes what it boots into until the update ends, through a
// rollback of such an action (an etcd restore included); a worker never has it.
func TestRescueWanted(t *testing.T) {
	cpKubeadm := Spec{ControlPlane: true, Kubeadm: protocol.KubeadmUpgradeApply, Version: "v1.36.0"}
	tests := []struct {
		name   string
		spec   Spec
		failOn string
		// armed lists the actions before which the rescue is wanted; every
		// other action runs without it.
		armed []string
		end   protocol.Phase
	}{
		{"control plane, OS image first: from activate", cpFull, "", []string{
			"backend-activate", "reboot", "backend-verify", "backup-files", "write-files", "kubelet-config", "install-kubeadm",
			"kubeadm-upgrade", "install-kubelet", "restart-kubelet", "gates", "backend-commit"}, protocol.PhaseCommitted},
		{"control plane, Kubernetes before the image: from the plan's files", withBinaries(cpFull), "", []string{
			"write-files", "kubelet-config", "install-kubeadm", "kubeadm-upgrade", "install-kubelet", "backend-activate", "reboot",
			"backend-verify", "gates", "backend-commit"}, protocol.PhaseCommitted},
		{"control plane, Kubernetes only: from kubeadm upgrade (a new kubeadm binary starts nothing at boot)", cpKubeadm, "", []string{
			"kubeadm-upgrade", "install-kubelet", "restart-kubelet", "gates"}, protocol.PhaseCommitted},
		{"control plane, component configuration: from control-plane-config",
			Spec{ControlPlane: true, EtcdSnapshot: true, Kubeadm: protocol.KubeadmNone, ControlPlaneConfig: true}, "",
			[]string{"control-plane-config", "gates"}, protocol.PhaseCommitted},
		{"control plane, users and NTP only: never",
			Spec{ControlPlane: true, Kubeadm: protocol.KubeadmNone, Users: true, NTP: true}, "", nil, protocol.PhaseCommitted},
		{"worker, everything: never", Spec{Kubeadm: protocol.KubeadmUpgradeNode, Version: "v1.36.0", Files: true, KubeletArgs: true, OS: true, Caps: abCaps},
			"", nil, protocol.PhaseCommitted},
		{"worker, failed gates: never, rollback included",
			Spec{Kubeadm: protocol.KubeadmUpgradeNode, Version: "v1.36.0"}, "gates", nil, protocol.PhaseRolledBack},
		{"control plane, failed gates: the whole rollback, etcd restore included", cpKubeadm, "gates", []string{
			"kubeadm-upgrade", "install-kubelet", "restart-kubelet", "gates",
			"rollback/restore-files", "rollback/restore-etcd", "rollback/restart-kubelet"}, protocol.PhaseRolledBack},
		{"control plane, kubelet install failed while running: its rollback", cpKubeadm, "install-kubelet", []string{
			"kubeadm-upgrade", "install-kubelet", "rollback/restore-files", "rollback/restore-etcd", "rollback/restart-kubelet"}, protocol.PhaseRolledBack},
		{"control plane, kubeadm install failed while running: never (a kubeadm binary starts nothing at boot)", cpKubeadm, "install-kubeadm",
			nil, protocol.PhaseRolledBack},
		{"control plane, staging failed: the image's rollback changes no boot", cpFull, "backend-stage", nil, protocol.PhaseRolledBack},
		{"control plane, backup failed: nothing to roll back", cpKubeadm, "backup-files", nil, protocol.PhaseFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			h := newHost()
			if tt.failOn != "" {
				h.failOn[tt.failOn] = "failed"
			}
			before, after, end := armedAlong(t, h, tt.spec)
			var armed []string
			for key, want := range before {
				if want {
					armed = append(armed, key)
				}
			}
			g.Expect(end).To(Equal(tt.end))
			if tt.armed == nil {
				g.Expect(armed).To(BeEmpty())
			} else {
				g.Expect(armed).To(ConsistOf(tt.armed))
			}
			g.Expect(after).To(BeFalse(), "a finished update needs no rescue")
		})
	}
}

// TestRescueWantedOutsideAnUpdate: no plan, or a finished one, wants no rescue.
func TestRescueWantedOutsideAnUpdate(t *testing.T) {
	g := NewWithT(t)
	g.Expect(State{}.RescueWanted()).To(BeFalse())
	s, _ := start(t, cpFull)
	s.Phase = protocol.PhaseFailed
	g.Expect(s.RescueWanted()).To(BeFalse())
}
