package status

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// now is the fixed "now" of every pure test.
var now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

type machineOpt func(*clusterv1.Machine)

func machine(name string, opts ...machineOpt) clusterv1.Machine {
	m := clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec:       clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.36.0"},
		Status: clusterv1.MachineStatus{
			NodeRef:  clusterv1.MachineNodeReference{Name: name},
			Phase:    "Running",
			NodeInfo: &corev1.NodeSystemInfo{KubeletVersion: "v1.35.0"},
		},
	}
	for _, o := range opts {
		o(&m)
	}
	return m
}

func controlPlane(m *clusterv1.Machine) {
	m.Labels = map[string]string{clusterv1.MachineControlPlaneLabel: ""}
}

func noNodeRef(m *clusterv1.Machine) { m.Status.NodeRef = clusterv1.MachineNodeReference{} }

func withCondition(condType string, status metav1.ConditionStatus, reason, message string, since time.Time) machineOpt {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{
			Type: condType, Status: status, Reason: reason, Message: message,
			LastTransitionTime: metav1.NewTime(since),
		})
	}
}

type nodeOpt func(*corev1.Node)

func node(name, kubelet string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Status:     corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func annotate(key, value string) nodeOpt {
	return func(n *corev1.Node) { n.Annotations[key] = value }
}

func cordoned(by string) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		if by != "" {
			n.Annotations[inplacev1.CordonedByAnnotation] = by
		}
	}
}

func agentStatus(t *testing.T, s protocol.NodeStatus) nodeOpt {
	t.Helper()
	v, err := protocol.EncodeStatus(s)
	if err != nil {
		t.Fatalf("encode status: %v", err)
	}
	return annotate(inplacev1.StatusAnnotation, v)
}

func cluster(name string) clusterv1.Cluster {
	return clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
}

func nodes(ns ...*corev1.Node) map[string]*corev1.Node {
	m := map[string]*corev1.Node{}
	for _, n := range ns {
		m[n.Name] = n
	}
	return m
}

const (
	planA = "sha256-aaaaaaaaaaaaaaaaaaaaaaaa"
	planB = "sha256-bbbbbbbbbbbbbbbbbbbbbbbb"
)

// rolloutSnapshot is a cluster in the middle of an in-place rollout: one control-plane
// node done, one worker applying, one worker rolled back, one worker waiting for its
// agent, one not yet joined; and a second cluster whose workload API is unreachable.
func rolloutSnapshot(t *testing.T) Snapshot {
	t.Helper()
	return Snapshot{
		Namespace: "default",
		Clusters: []ClusterSnapshot{
			{
				Cluster: func() clusterv1.Cluster {
					c := cluster("edge")
					c.Annotations = map[string]string{inplacev1.PausedAnnotation: "true"}
					c.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
						Reason: inplacev1.ReasonRolledBack, Message: "node edge-cp-0 rolled back: etcd health gate failed", LastTransitionTime: metav1.NewTime(now)}}
					return c
				}(),
				Machines: []clusterv1.Machine{
					machine("edge-cp-0", controlPlane,
						withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now.Add(-90*time.Second))),
				},
				WorkloadErr: errors.New("list nodes of cluster default/edge: dial tcp 10.0.0.1:6443: connect: connection refused"),
			},
			{
				Cluster: cluster("demo"),
				Machines: []clusterv1.Machine{
					machine("demo-md-0-b", withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now.Add(-2*time.Minute)),
						withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionFalse, clusterv1.MachineUpToDateUpdatingReason, "", now.Add(-2*time.Minute))),
					machine("demo-cp-0", controlPlane,
						withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionFalse, clusterv1.MachineNotUpdatingReason, "", now),
						withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionTrue, clusterv1.MachineUpToDateReason, "", now)),
					machine("demo-md-0-a",
						withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now.Add(-5*time.Minute)),
						withCondition(inplacev1.InPlaceUpdateCondition, metav1.ConditionFalse, inplacev1.ReasonRolledBack, "node rolled back", now)),
					machine("demo-md-0-c"),
					machine("demo-md-0-d", noNodeRef, func(m *clusterv1.Machine) { m.Status.NodeInfo = nil; m.Status.Phase = "Provisioning" }),
				},
				Nodes: nodes(
					node("demo-cp-0", "v1.36.0",
						annotate(inplacev1.DesiredPlanAnnotation, planA), annotate(inplacev1.CurrentPlanAnnotation, planA),
						agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseCommitted, Step: 7, Steps: 7,
							Action: "commit", StartedAt: now.Add(-10 * time.Minute), UpdatedAt: now.Add(-10*time.Minute + 125*time.Second)})),
					node("demo-md-0-b", "v1.35.0", cordoned("capi-inplace"),
						annotate(inplacev1.DesiredPlanAnnotation, planB),
						agentStatus(t, protocol.NodeStatus{PlanHash: planB, Phase: protocol.PhaseApplying, Step: 3, Steps: 7,
							Action: "kubeadm-upgrade", Message: "running kubeadm upgrade node", StartedAt: now.Add(-80 * time.Second), UpdatedAt: now.Add(-5 * time.Second)})),
					node("demo-md-0-a", "v1.35.0",
						annotate(inplacev1.DesiredPlanAnnotation, planB),
						agentStatus(t, protocol.NodeStatus{PlanHash: planB, Phase: protocol.PhaseRolledBack, Step: 5, Steps: 7,
							Action: "verify", Reason: "HealthGateFailed", Message: "kubelet did not become Ready within 5m0s",
							StartedAt: now.Add(-5 * time.Minute), UpdatedAt: now.Add(-30 * time.Second)})),
					node("demo-md-0-c", "v1.35.0", cordoned(""), annotate(inplacev1.DesiredPlanAnnotation, planB)),
				),
			},
		},
	}
}
