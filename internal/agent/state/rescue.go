package state

import "github.com/capi-inplace/capi-inplace/internal/protocol"

// changesBoot reports whether a forward action changes what the node boots
// into: the OS image (activate makes it the next boot, or applies it live),
// files the plan writes anywhere (an audit policy or an extra argument's file
// the API server reads at start), the kubelet's flags, the control-plane static
// pods (control-plane-config, kubeadm upgrade) and the kubelet binary (kubeadm
// alone starts nothing at boot).
// Users and the NTP client do not stop a control plane from starting; the
// reboot, the kubelet restart, the gates and the commit only follow one of these.
func changesBoot(n ActionName) bool {
	switch n {
	case ActBackendActivate, ActWriteFiles, ActKubeletConfig, ActControlPlaneConfig, ActInstallBinaries, ActKubeadmUpgrade, ActInstallKubelet:
		return true
	}
	return false
}

// firstBootChange is the index of the first forward action that changes what
// the node boots into; -1 when none does.
func firstBootChange(actions []Action) int {
	for i, a := range actions {
		if changesBoot(a.Name) {
			return i
		}
	}
	return -1
}

// RescueWanted reports whether the node needs the rescue static pod in place
// for s (the one arming rule; the executor arms before the action s would run
// next and disarms when this turns false, and the agent and the rescue pod
// remove a pod no journal wants when they take the journal's lock).
//
// After a reboot a kubelet without an API server starts static pods only, no
// DaemonSet pod: on a control plane whose update left an API server that cannot
// start (a new manifest that crash-loops, a swapped kubelet or image), nothing
// but a static pod can roll the node back. So a control plane keeps the rescue
// pod from before the first action that changes what it boots into
// (changesBoot) until the update ends: committed, rolled back or failed. A
// rollback keeps it while the update had reached such an action (done, or
// failed while running), which covers an etcd restore: it follows kubeadm or
// control-plane-config. Workers never: a static pod cannot bring back an API
// server on another node, and a worker's agent returns with the control plane.
func (s State) RescueWanted() bool {
	if !s.Spec.ControlPlane || s.PlanHash == "" || s.Phase.Terminal() {
		return false
	}
	first := firstBootChange(s.Actions)
	if first < 0 {
		return false
	}
	if s.Phase == protocol.PhaseRollingBack {
		for _, a := range s.Actions[first:] {
			if a.Done || a.Name == s.FailedAction {
				return true
			}
		}
		return false
	}
	// Forward: the next action is the first that changes the boot, or later.
	for _, a := range s.Actions[:first] {
		if !a.Done {
			return false
		}
	}
	return true
}

// CurrentAction returns the action the state runs next (forward or rollback):
// the first not done of the active list; false in a terminal phase.
func (s State) CurrentAction() (Action, bool) {
	if c := s.current(); c != nil {
		return *c, true
	}
	return Action{}, false
}
