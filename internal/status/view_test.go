package status

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestBuildMachine(t *testing.T) {
	started := now.Add(-80 * time.Second)
	tests := []struct {
		name      string
		machine   clusterv1.Machine
		node      *corev1.Node
		reachable bool
		check     func(g *WithT, mv MachineView)
	}{
		{
			name:      "a node without plan is idle and schedulable, versions from the Node",
			machine:   machine("m"),
			node:      node("m", "v1.35.2"),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(BeEmpty())
				g.Expect(mv.Role).To(Equal(RoleWorker))
				g.Expect(mv.Version).To(Equal("v1.36.0"))
				g.Expect(mv.KubeletVersion).To(Equal("v1.35.2"), "the Node is the truth, not the Machine's copy")
				g.Expect(mv.Drain).To(Equal(Drain{State: DrainSchedulable}))
				g.Expect(mv.StartedAt).To(BeNil())
				g.Expect(mv.Problems).To(BeEmpty())
				g.Expect(mv.Failed()).To(BeFalse())
				g.Expect(mv.InProgress()).To(BeFalse())
			},
		},
		{
			name:    "a node whose rollback failed is Degraded, failed and never usable",
			machine: machine("m"),
			node: node("m", "v1.35.0", cordoned("capi-inplace"), annotate(inplacev1.DesiredPlanAnnotation, planA),
				agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseFailed, Reason: protocol.ReasonRollbackFailed, Message: "restore-files failed"})),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Degraded).To(BeTrue())
				g.Expect(mv.Failed()).To(BeTrue())
				g.Expect(details(mv)).To(Equal("DEGRADED, kept cordoned, needs manual repair: RollbackFailed: restore-files failed"))
			},
		},
		{
			name:      "the Machine's Degraded condition says so when the agent's status is gone",
			machine:   machine("m", withCondition(inplacev1.InPlaceUpdateCondition, metav1.ConditionFalse, inplacev1.ReasonDegraded, "node m is degraded: JournalCorrupt", now)),
			node:      node("m", "v1.35.0", cordoned("capi-inplace")),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Degraded).To(BeTrue())
				g.Expect(mv.Failed()).To(BeTrue())
				g.Expect(details(mv)).To(ContainSubstring("DEGRADED"))
				g.Expect(details(mv)).To(ContainSubstring("JournalCorrupt"))
			},
		},
		{
			name:    "the agent's status for the desired plan gives phase, progress and elapsed time",
			machine: machine("m", controlPlane),
			node: node("m", "v1.35.0", cordoned("capi-inplace"), annotate(inplacev1.DesiredPlanAnnotation, planA),
				agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseApplying, Step: 3, Steps: 7,
					Action: "kubeadm-upgrade", Message: "running", StartedAt: started, UpdatedAt: now.Add(-time.Second)})),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Role).To(Equal(RoleControlPlane))
				g.Expect(mv.Phase).To(Equal(protocol.PhaseApplying))
				g.Expect([]int{mv.Step, mv.Steps}).To(Equal([]int{3, 7}))
				g.Expect(mv.Action).To(Equal("kubeadm-upgrade"))
				g.Expect(mv.StartedAt).To(HaveValue(Equal(started)))
				g.Expect(mv.ElapsedSeconds).To(Equal(int64(80)), "a running plan counts up to now")
				g.Expect(mv.Drain).To(Equal(Drain{State: DrainCordoned, Unschedulable: true, CordonedBy: "capi-inplace"}))
				g.Expect(mv.InProgress()).To(BeTrue())
				g.Expect(mv.Failure).To(BeEmpty())
			},
		},
		{
			name:    "a rolled-back plan is a failure with its cause; elapsed stops at the last update",
			machine: machine("m"),
			node: node("m", "v1.35.0", annotate(inplacev1.DesiredPlanAnnotation, planA),
				agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseRolledBack, Step: 5, Steps: 7,
					Reason: "HealthGateFailed", Message: "kubelet not Ready", StartedAt: started, UpdatedAt: started.Add(42 * time.Second)})),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(Equal(protocol.PhaseRolledBack))
				g.Expect(mv.Failure).To(Equal("HealthGateFailed: kubelet not Ready"))
				g.Expect(mv.ElapsedSeconds).To(Equal(int64(42)))
				g.Expect(mv.Failed()).To(BeTrue())
				g.Expect(mv.InProgress()).To(BeFalse())
			},
		},
		{
			name:    "a Failed plan with only a reason still names the cause",
			machine: machine("m"),
			node: node("m", "v1.35.0", agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseFailed,
				Reason: "PlanRejected"})),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(Equal(protocol.PhaseFailed), "no desired annotation: the status stands on its own")
				g.Expect(mv.Failure).To(Equal("PlanRejected"))
				g.Expect(mv.Failed()).To(BeTrue())
			},
		},
		{
			name:    "a status about an older plan means the agent has not picked up the desired one",
			machine: machine("m"),
			node: node("m", "v1.35.0", annotate(inplacev1.DesiredPlanAnnotation, planB), annotate(inplacev1.CurrentPlanAnnotation, planA),
				agentStatus(t, protocol.NodeStatus{PlanHash: planA, Phase: protocol.PhaseRolledBack, Reason: "Old"})),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(Equal(protocol.PhasePending))
				g.Expect(mv.Message).To(Equal("waiting for the agent to pick up plan sha256-bbbbb"))
				g.Expect(mv.Failed()).To(BeFalse(), "an old plan's rollback is not this plan's failure")
				g.Expect(mv.DesiredPlan).To(Equal(planB))
				g.Expect(mv.CurrentPlan).To(Equal(planA))
			},
		},
		{
			name:      "desired equal to current without a status is committed",
			machine:   machine("m"),
			node:      node("m", "v1.36.0", annotate(inplacev1.DesiredPlanAnnotation, planA), annotate(inplacev1.CurrentPlanAnnotation, planA)),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(Equal(protocol.PhaseCommitted))
			},
		},
		{
			name:      "an unreadable status annotation is reported, not fatal",
			machine:   machine("m"),
			node:      node("m", "v1.35.0", annotate(inplacev1.DesiredPlanAnnotation, planA), annotate(inplacev1.StatusAnnotation, `{"v":9}`)),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Phase).To(Equal(protocol.PhasePending))
				g.Expect(mv.Problems).To(ConsistOf(ContainSubstring("unreadable agent status: invalid node status: envelope version 9")))
			},
		},
		{
			name:      "a node cordoned by someone else is not ours to uncordon",
			machine:   machine("m"),
			node:      node("m", "v1.35.0", cordoned("")),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Drain).To(Equal(Drain{State: DrainCordonedExternally, Unschedulable: true}))
			},
		},
		{
			name: "a blocked drain comes from capi-inplace's Machine condition",
			machine: machine("m", withCondition(inplacev1.InPlaceUpdateCondition, metav1.ConditionFalse, inplacev1.ReasonDrainBlocked,
				"PodDisruptionBudget default/web allows no disruption", now)),
			node:      node("m", "v1.35.0", cordoned("capi-inplace")),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Drain.State).To(Equal(DrainBlocked))
				g.Expect(mv.Drain.Message).To(Equal("PodDisruptionBudget default/web allows no disruption"))
				g.Expect(mv.Drain.CordonedBy).To(Equal("capi-inplace"))
			},
		},
		{
			name:      "without a node yet there is nothing node-side to show",
			machine:   machine("m", noNodeRef),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Node).To(BeEmpty())
				g.Expect(mv.Drain.State).To(Equal(DrainUnknown))
				g.Expect(mv.Problems).To(Equal([]string{"no node yet"}))
			},
		},
		{
			name:      "a nodeRef to a missing Node is a problem",
			machine:   machine("m"),
			reachable: true,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Problems).To(Equal([]string{"node m not found in the workload cluster"}))
				g.Expect(mv.KubeletVersion).To(Equal("v1.35.0"), "falls back to the Machine's status.nodeInfo")
			},
		},
		{
			name: "an unreachable workload cluster leaves management-side data, timed from CAPI's Updating condition",
			machine: machine("m",
				withCondition(clusterv1.MachineUpdatingCondition, metav1.ConditionTrue, clusterv1.MachineInPlaceUpdatingReason, "", now.Add(-90*time.Second)),
				withCondition(clusterv1.MachineUpToDateCondition, metav1.ConditionFalse, clusterv1.MachineUpToDateUpdatingReason, "updating", now)),
			reachable: false,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Problems).To(BeEmpty(), "said once for the cluster")
				g.Expect(mv.KubeletVersion).To(Equal("v1.35.0"))
				g.Expect(mv.Drain.State).To(Equal(DrainUnknown))
				g.Expect(mv.Conditions.Updating).To(Equal(&Condition{Status: "True", Reason: clusterv1.MachineInPlaceUpdatingReason}))
				g.Expect(mv.Conditions.UpToDate).To(Equal(&Condition{Status: "False", Reason: clusterv1.MachineUpToDateUpdatingReason, Message: "updating"}))
				g.Expect(mv.ElapsedSeconds).To(Equal(int64(90)))
			},
		},
		{
			name:      "capi-inplace's own failure condition names the cause when the node cannot be read",
			machine:   machine("m", withCondition(inplacev1.InPlaceUpdateCondition, metav1.ConditionFalse, inplacev1.ReasonFailed, "agent reported Failed", now)),
			reachable: false,
			check: func(g *WithT, mv MachineView) {
				g.Expect(mv.Failure).To(Equal(inplacev1.ReasonFailed + ": agent reported Failed"))
				g.Expect(mv.Failed()).To(BeFalse(), "the exit code follows the node's phase, which is unknown here")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.check(g, buildMachine(&tt.machine, tt.node, tt.reachable, now))
		})
	}
}

func TestBuildReport(t *testing.T) {
	tests := []struct {
		name  string
		snap  Snapshot
		check func(g *WithT, r Report)
	}{
		{
			name: "clusters sorted by name, control plane first, summary counts",
			snap: rolloutSnapshot(t),
			check: func(g *WithT, r Report) {
				g.Expect(r.APIVersion).To(Equal(ReportAPIVersion))
				g.Expect(r.Kind).To(Equal(ReportKind))
				g.Expect(r.GeneratedAt).To(Equal(now))
				g.Expect(r.Clusters).To(HaveLen(2))
				g.Expect(r.Clusters[0].Name).To(Equal("demo"))
				var names []string
				for _, m := range r.Clusters[0].Machines {
					names = append(names, m.Name)
				}
				g.Expect(names).To(Equal([]string{"demo-cp-0", "demo-md-0-a", "demo-md-0-b", "demo-md-0-c", "demo-md-0-d"}))
				g.Expect(r.Clusters[1].WorkloadReachable).To(BeFalse())
				g.Expect(r.Clusters[1].WorkloadError).To(ContainSubstring("connection refused"))
				g.Expect(r.Clusters[1].Paused).To(BeTrue())
				g.Expect(r.Clusters[1].InPlaceUpdate).To(Equal(&Condition{Status: "False", Reason: inplacev1.ReasonRolledBack,
					Message: "node edge-cp-0 rolled back: etcd health gate failed"}))
				g.Expect(r.Clusters[0].Paused).To(BeFalse())
				g.Expect(r.Clusters[0].InPlaceUpdate).To(BeNil())
				g.Expect(r.Summary).To(Equal(Summary{Machines: 6, InProgress: 2, Failed: 1, UnreachableClusters: 1}))
				g.Expect(r.FailedMachines()).To(Equal([]string{"default/demo-md-0-a (RolledBack)"}))
			},
		},
		{
			name: "no clusters is an empty list, not null",
			snap: Snapshot{Namespace: "ns"},
			check: func(g *WithT, r Report) {
				g.Expect(r.Clusters).NotTo(BeNil())
				g.Expect(r.Clusters).To(BeEmpty())
				g.Expect(r.FailedMachines()).To(BeEmpty())
			},
		},
		{
			name: "a cluster without machines has an empty machine list",
			snap: Snapshot{Clusters: []ClusterSnapshot{{Cluster: cluster("c"), WorkloadErr: errors.New("x")}}},
			check: func(g *WithT, r Report) {
				g.Expect(r.Clusters[0].Machines).NotTo(BeNil())
				g.Expect(r.Summary.UnreachableClusters).To(Equal(1))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tt.check(g, Build(tt.snap, now))
		})
	}
}
