package status

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

const waitMessage = "node w1 waits for the control plane to be at v1.36.0 before its kubelet moves to it: control-plane Machine cp3 is being updated (a kubelet must not be newer than an API server it reaches)"

// waitingForControlPlane is a worker Machine Cluster API updates whose update the
// coordinator holds for the control plane (its InPlaceUpdate condition).
func waitingForControlPlane(m *clusterv1.Machine) {
	withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now)(m)
	withCondition(inplacev1.InPlaceUpdateCondition, metav1.ConditionFalse, inplacev1.ReasonWaitingForControlPlane, waitMessage, now)(m)
}

// TestBuildMachineWaitingForControlPlane: a worker held for the control plane
// shows it in PHASE and DETAILS, from the Machine alone (machinestate), staged
// ahead or not, reachable or not; it counts as updating in the fleet list, which
// names it.
func TestBuildMachineWaitingForControlPlane(t *testing.T) {
	tests := []struct {
		name      string
		m         clusterv1.Machine
		node      *corev1.Node
		reachable bool
	}{
		{name: "reachable", m: machine("w1", waitingForControlPlane), node: node("w1", "v1.35.0"), reachable: true},
		{name: "workload cluster unreachable", m: machine("w1", waitingForControlPlane)},
		{name: "its plan staged meanwhile", m: machine("w1", stagedAhead, waitingForControlPlane), node: node("w1", "v1.35.0"), reachable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			mv := buildMachine(&tt.m, tt.node, tt.reachable, now)
			g.Expect(mv.WaitingForControlPlane).To(Equal(waitMessage))
			g.Expect(phaseCell(mv, tt.reachable)).To(Equal("WaitingForControlPlane"))
			g.Expect(details(mv)).To(Equal(waitMessage))
		})
	}

	g := NewWithT(t)
	inDemo := func(m *clusterv1.Machine) { m.Labels[clusterv1.ClusterNameLabel] = "demo" }
	noLabels := func(m *clusterv1.Machine) { m.Labels = map[string]string{} }
	cp := machine("cp3", controlPlane, inDemo, withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now))
	l := BuildFleetList([]clusterv1.Cluster{cluster("demo")}, []clusterv1.Machine{cp, machine("w1", noLabels, inDemo, waitingForControlPlane)}, now)
	g.Expect(l.Clusters).To(HaveLen(1))
	g.Expect(l.Clusters[0].State).To(Equal(ClusterUpdating))
	g.Expect(l.Clusters[0].Message).To(Equal("2 of 2 Machines updating; Machine w1: " + inplacev1.ReasonWaitingForControlPlane + ": " + waitMessage))
}
