package state

import (
	"fmt"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Facts are what the agent knows about its node when a plan arrives.
type Facts struct {
	NodeName string
	// KubeletVersion is Node.status.nodeInfo.kubeletVersion.
	KubeletVersion string
	// Backends are the OS backend names this agent can use.
	Backends []string
}

// Rejection is why a plan cannot be applied at all.
type Rejection struct {
	Reason  string
	Message string
}

// Admit decides whether a decoded, valid plan can be applied to this node. A
// rejected plan changes nothing on the node.
func Admit(p *protocol.NodePlan, f Facts) *Rejection {
	if p.NodeName != f.NodeName {
		return &Rejection{ReasonPlanForAnotherNode, fmt.Sprintf("the plan is for node %q, this is node %q", p.NodeName, f.NodeName)}
	}
	if p.OS != nil {
		known := false
		for _, b := range f.Backends {
			known = known || (b == p.OS.Backend && b != "none")
		}
		if !known {
			return &Rejection{ReasonUnknownBackend, fmt.Sprintf("the plan switches the OS image with backend %q, but this agent has only %s",
				p.OS.Backend, strings.Join(f.Backends, ", "))}
		}
	}
	if r := admitVersion(p.Kubernetes, f.KubeletVersion); r != nil {
		return r
	}
	return nil
}

func admitVersion(k protocol.KubernetesPlan, current string) *Rejection {
	unreachable := func(format string, args ...any) *Rejection {
		return &Rejection{ReasonVersionUnreachable, fmt.Sprintf(format, args...)}
	}
	if current == "" {
		return unreachable("the node reports no kubelet version, so Kubernetes %s cannot be checked for skew", k.Version)
	}
	cur, err := protocol.ParseVersion(current)
	if err != nil {
		return unreachable("the node's kubelet version %q is not a version", current)
	}
	want, err := protocol.ParseVersion(k.Version)
	if err != nil {
		return unreachable("the target version %q is not a version", k.Version)
	}
	step := protocol.ClassifyVersionStep(cur, want)
	if k.Action == protocol.KubeadmNone {
		if step != protocol.StepSame {
			return unreachable("the plan targets Kubernetes %s but runs no kubeadm upgrade, and the kubelet is %s", k.Version, current)
		}
		return nil
	}
	switch step {
	case protocol.StepDowngrade:
		return unreachable("Kubernetes %s is older than the node's kubelet %s: downgrades are not supported", k.Version, current)
	case protocol.StepMajor, protocol.StepSkipsMinor:
		return unreachable("Kubernetes %s is more than one minor version from the node's kubelet %s: kubeadm upgrades one minor at a time", k.Version, current)
	}
	return nil
}
