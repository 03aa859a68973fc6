package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The control plane first (Kubernetes' version skew policy: a kubelet must not be
// newer than any kube-apiserver it talks to, and a worker's kubelet reaches every
// API server of the cluster through its load balancer).
//
// Upstream does not order this for in-place updates. KubeadmControlPlane's
// status.versions takes each Machine's version from its node's kubelet (and from
// spec.version only before the node reports one), and a node's kubelet reports
// the new version before the Machine's in-place update is over: the agent
// restarts the new kubelet before the gates judge the update, which may still
// roll it back. The topology controller then takes the control plane as
// upgraded and moves the MachineDeployments while the last control plane may
// still roll back (seen on real nodes, when the agent still installed the
// kubelet before `kubeadm upgrade node`: the third control plane lost power in
// it, its kubelet came back at v1.36.3, and both workers ran kubelet v1.36.3
// while its v1.35.4 API server restarted). In a plain
// cluster an operator can move a MachineDeployment before the control plane
// finished just as well. So the coordinator holds a worker's update that raises
// its kubelet's version, before cordon, until the control plane is there
// (ControlPlaneGate), and says so on the Machine (ReasonWaitingForControlPlane).
//
// Any raise is held, a patch release too: the policy states "not newer than the
// API server" without an exception for patches, the control plane of a rollout
// moves first anyway (the hold costs at most the rest of its update), and one rule
// is one thing to explain. An update that keeps the kubelet's version (files, an
// OS image at the same release) is not held.

// retryControlPlane is how soon CAPI calls again while a worker waits for the
// control plane: the end of a control-plane node's update starts the waiting
// workers within this.
const retryControlPlane = 10 * time.Second

// ControlPlaneWait is why a worker's update waits for its control plane; ""
// (ControlPlaneReady) lets it go on. Callers decide on it, never on the message.
type ControlPlaneWait string

const (
	// ControlPlaneReady: the update does not wait (not a worker, already started,
	// no raise of the kubelet's version, or the control plane is at the target).
	ControlPlaneReady ControlPlaneWait = ""
	// WaitMachineUpdating: a control-plane Machine is being updated (Cluster API's
	// update-in-progress annotation): its node may still serve the old API server.
	WaitMachineUpdating ControlPlaneWait = "MachineUpdating"
	// WaitMachineBehind: a control-plane Machine asks for an older version (or for
	// none that parses).
	WaitMachineBehind ControlPlaneWait = "MachineBehind"
	// WaitNodeBehind: a control-plane Machine's node reports an older kubelet (or
	// none that parses): its update has not reached it.
	WaitNodeBehind ControlPlaneWait = "NodeBehind"
)

// ControlPlaneMachine is what the gate needs of one control-plane Machine.
type ControlPlaneMachine struct {
	Name string
	// Version is its spec.version.
	Version string
	// Updating: Cluster API's update-in-progress annotation is set.
	Updating bool
	// Node is its node's name (status.nodeRef) and NodeKubelet that node's
	// status.nodeInfo.kubeletVersion as the workload cluster reports it; Node ""
	// (not joined, or the node is gone) skips the node check.
	Node        string
	NodeKubelet string
}

// ControlPlaneGateInput is what the gate sees of a worker's update not yet
// started and of its cluster's control plane.
type ControlPlaneGateInput struct {
	// Node is the node being updated, for messages.
	Node string
	// Worker is false for a control-plane Machine: never held (the control plane
	// orders its own nodes, KCP or the single-node path).
	Worker bool
	// Started: the update is past its start (cordoned by us, or its plan
	// published): never held, it runs to a safe point.
	Started bool
	// Target is the Machine's spec.version, Kubelet its node's kubelet now.
	Target, Kubelet string
	// Machines are the cluster's control-plane Machines (label
	// cluster.x-k8s.io/control-plane); none known holds nothing (a control plane
	// not made of Machines, e.g. a hosted one, is its provider's to order).
	Machines []ControlPlaneMachine
}

// ControlPlaneVerdict is the gate's answer.
type ControlPlaneVerdict struct {
	Wait ControlPlaneWait
	// Blocker names the control-plane Machine that holds the update.
	Blocker string
	// Message is for humans only: the Machine's condition and the hook's answer.
	Message    string
	RetryAfter time.Duration
}

// Hold is the verdict as a fleet hold (stageAhead, countHold).
func (v ControlPlaneVerdict) Hold() fleet.Hold {
	return fleet.Hold{Reason: fleet.HoldWaitingForControlPlane, Message: v.Message, RetryAfter: v.RetryAfter}
}

// ControlPlaneGate decides whether a worker's update not yet started may go on to
// cordon now: only when it does not raise the kubelet's version, or every
// control-plane Machine asks for at least the target, none is being updated, and
// each one's node reports a kubelet of at least the target. The first Machine
// (in the order given) that holds is named. Pure.
func ControlPlaneGate(in ControlPlaneGateInput) ControlPlaneVerdict {
	if !in.ordered() {
		return ControlPlaneVerdict{}
	}
	target, _ := parseRelease(in.Target) // parses: ordered
	hold := func(wait ControlPlaneWait, m ControlPlaneMachine, why string) ControlPlaneVerdict {
		return ControlPlaneVerdict{Wait: wait, Blocker: m.Name, RetryAfter: retryControlPlane,
			Message: fmt.Sprintf("node %s waits for the control plane to be at %s before its kubelet moves to it: %s (a kubelet must not be newer than an API server it reaches)",
				in.Node, in.Target, why)}
	}
	for _, m := range in.Machines {
		switch {
		case m.Updating:
			return hold(WaitMachineUpdating, m, fmt.Sprintf("control-plane Machine %s is being updated", m.Name))
		case !atLeast(m.Version, target):
			return hold(WaitMachineBehind, m, fmt.Sprintf("control-plane Machine %s asks for %q", m.Name, m.Version))
		case m.Node != "" && !atLeast(m.NodeKubelet, target):
			return hold(WaitNodeBehind, m, fmt.Sprintf("control-plane node %s runs kubelet %q", m.Node, m.NodeKubelet))
		}
	}
	return ControlPlaneVerdict{}
}

// ordered reports whether the update is one the control plane must lead: a
// worker's, not started, that raises its kubelet's version. A target that does
// not parse orders nothing (the plan refuses such a spec); a kubelet that does
// not report a version that parses counts as raised.
func (in ControlPlaneGateInput) ordered() bool {
	if !in.Worker || in.Started || in.Target == "" {
		return false
	}
	target, err := parseRelease(in.Target)
	if err != nil {
		return false
	}
	cur, err := parseRelease(in.Kubelet)
	return err != nil || cur.LT(target)
}

// parseRelease is protocol.ParseVersion without build metadata (a kubelet reports
// what it was built as, "v1.36.0+k3s1").
func parseRelease(s string) (semver.Version, error) {
	v, err := protocol.ParseVersion(s)
	v.Build = nil
	return v, err
}

// atLeast reports whether version s is target or newer; false when s does not parse.
func atLeast(s string, target semver.Version) bool {
	v, err := parseRelease(s)
	return err == nil && v.GTE(target)
}

// holdForControlPlane holds a worker's update that has not started while
// ControlPlaneGate says so: it answers in progress with the reason on the
// Machine's InPlaceUpdate condition (an Event when the condition takes it), and
// stages the plan meanwhile within the pool's download windows, as a closed
// maintenance window does (stageAhead): only cordon and apply wait. held false:
// the update goes on, and a condition this hold wrote says so.
func (c *Coordinator) holdForControlPlane(ctx context.Context, s *scope, o Observation, pool fleet.Pool) (Outcome, bool) {
	if nodeplan.RoleOf(s.machine) != protocol.RoleWorker {
		return Outcome{}, false
	}
	v, out, ok := c.controlPlaneVerdict(ctx, s, o)
	if !ok {
		return out, true
	}
	if v.Wait == ControlPlaneReady {
		c.clearWaitingForControlPlane(ctx, s)
		return Outcome{}, false
	}
	c.showWaitingForControlPlane(ctx, s, v.Message)
	c.countHold(string(fleet.HoldWaitingForControlPlane))
	return c.stageAhead(ctx, s, pool, v.Hold()), true
}

// controlPlaneVerdict reads the gate's input and decides. The control-plane
// Machines come from the manager's cache and their Nodes from the workload
// cluster's caches when the coordinator has them: a held call adds no live read.
// A release is decided on live reads, as every step that writes is (caches.go):
// a cache that is behind can then only hold a worker longer, never let it go
// early. Without caches every read is live. ok false: answer out.
func (c *Coordinator) controlPlaneVerdict(ctx context.Context, s *scope, o Observation) (ControlPlaneVerdict, Outcome, bool) {
	in := ControlPlaneGateInput{Node: s.node.Name, Worker: true, Target: s.machine.Spec.Version, Kubelet: o.KubeletVersion,
		Started: o.Started || (o.Published != "" && o.Published == o.PlanHash)}
	if !in.ordered() {
		return ControlPlaneVerdict{}, Outcome{}, true // nothing to wait for, whatever the control plane does
	}
	if c.opts.Caches != nil && !c.fromCache {
		if cached, _, ok := c.opts.Caches.Workloads.For(ctx, s.clusterKey, s.wc, s.node.Name); ok {
			if machines, err := c.controlPlaneMachines(ctx, s, c.opts.Caches.Management); err == nil {
				if err := controlPlaneNodes(ctx, cached.Client, machines); err == nil {
					in.Machines = machines
					if v := ControlPlaneGate(in); v.Wait != ControlPlaneReady {
						return v, Outcome{}, true
					}
				}
			}
		}
	}
	machines, err := c.controlPlaneMachines(ctx, s, c.opts.Client)
	if err != nil {
		return ControlPlaneVerdict{}, retryable(CauseManagementAPI, stepMsg(stepAgent, "%v", err)), false
	}
	if err := controlPlaneNodes(ctx, s.wc.Client, machines); err != nil {
		return ControlPlaneVerdict{}, c.workloadFailure(s, stepAgent, err), false
	}
	in.Machines = machines
	return ControlPlaneGate(in), Outcome{}, true
}

// controlPlaneMachines lists the cluster's control-plane Machines, sorted by name
// so that the gate names the same blocker on every call.
func (c *Coordinator) controlPlaneMachines(ctx context.Context, s *scope, mgmt client.Reader) ([]ControlPlaneMachine, error) {
	list := &clusterv1.MachineList{}
	if err := mgmt.List(ctx, list, client.InNamespace(s.clusterKey.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: s.clusterKey.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
		return nil, fmt.Errorf("list the control-plane Machines of cluster %s: %w", s.clusterKey, err)
	}
	out := make([]ControlPlaneMachine, 0, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		_, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]
		out = append(out, ControlPlaneMachine{Name: m.Name, Version: m.Spec.Version, Updating: updating, Node: m.Status.NodeRef.Name})
	}
	slices.SortFunc(out, func(a, b ControlPlaneMachine) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// controlPlaneNodes reads the kubelet version of each Machine's node from the
// workload cluster. The nodes of the control-plane Machines are the control
// plane's nodes: read by name, never listed by role, so that only this cluster's
// Machines count. A node that is gone serves no API server: skipped.
func controlPlaneNodes(ctx context.Context, workload client.Reader, machines []ControlPlaneMachine) error {
	for i := range machines {
		m := &machines[i]
		if m.Node == "" {
			continue
		}
		n := &corev1.Node{}
		switch err := workload.Get(ctx, client.ObjectKey{Name: m.Node}, n); {
		case apierrors.IsNotFound(err):
			m.Node = ""
		case err != nil:
			return fmt.Errorf("read control-plane node %s: %w", m.Node, err)
		default:
			m.NodeKubelet = n.Status.NodeInfo.KubeletVersion
		}
	}
	return nil
}

// showWaitingForControlPlane puts the hold on the Machine's InPlaceUpdate
// condition, where `status`, `fleet status` and the FleetRollout controller see
// it (internal/fleet/machinestate), with an Event when the condition takes the
// reason (not when the control-plane Machine it names moves on).
func (c *Coordinator) showWaitingForControlPlane(ctx context.Context, s *scope, message string) {
	if _, newReason := c.showHeld(ctx, s, inplacev1.ReasonWaitingForControlPlane, message); newReason {
		c.opts.Recorder.Eventf(s.stored, nil, corev1.EventTypeNormal, inplacev1.EventWaitingForControlPlane, "ControlPlane", "%s", message)
	}
}

// clearWaitingForControlPlane says the update goes on once the control plane is
// at its version, so that the Machine is no longer shown waiting.
func (c *Coordinator) clearWaitingForControlPlane(ctx context.Context, s *scope) {
	c.clearHeld(ctx, s, inplacev1.ReasonWaitingForControlPlane,
		fmt.Sprintf("node %s: the control plane is at %s; its update starts", s.node.Name, s.machine.Spec.Version))
}
