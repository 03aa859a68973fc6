package coordinator

import (
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const (
	skipKey = clusterv1.MachineSkipRemediationAnnotation
	heldKey = inplacev1.RemediationHeldByAnnotation
)

func TestRemediationHoldAnnotations(t *testing.T) {
	ours := map[string]string{skipKey: remediationHeldValue, heldKey: remediationHeldValue}
	cases := []struct {
		name        string
		in          map[string]string
		hold, lift  map[string]string // ann after holdRemediation / releaseRemediation
		holdChanges bool
		liftChanges bool
	}{
		{name: "none: hold sets both, lift has nothing to do",
			in: map[string]string{}, hold: ours, lift: map[string]string{}, holdChanges: true},
		{name: "ours: hold is a no-op, lift removes both",
			in: ours, hold: ours, lift: map[string]string{}, liftChanges: true},
		{name: "the operator's: never touched",
			in:   map[string]string{skipKey: "investigating"},
			hold: map[string]string{skipKey: "investigating"}, lift: map[string]string{skipKey: "investigating"}},
		{name: "the operator's, empty value: never touched",
			in:   map[string]string{skipKey: ""},
			hold: map[string]string{skipKey: ""}, lift: map[string]string{skipKey: ""}},
		{name: "the operator removed ours during the update: not put back, marker cleared at the end",
			in:   map[string]string{heldKey: remediationHeldValue},
			hold: map[string]string{heldKey: remediationHeldValue}, lift: map[string]string{}, liftChanges: true},
		{name: "the operator rewrote ours during the update: theirs stays at the end",
			in:   map[string]string{heldKey: remediationHeldValue, skipKey: "keep"},
			hold: map[string]string{heldKey: remediationHeldValue, skipKey: "keep"}, lift: map[string]string{skipKey: "keep"}, liftChanges: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ann := maps.Clone(tc.in)
			g.Expect(holdRemediation(ann)).To(Equal(tc.holdChanges))
			g.Expect(ann).To(Equal(tc.hold))
			ann = maps.Clone(tc.in)
			g.Expect(releaseRemediation(ann)).To(Equal(tc.liftChanges))
			g.Expect(ann).To(Equal(tc.lift))
		})
	}
}

// machineAnnotations are the annotations of m as stored.
func (f *fixture) machineAnnotations(m *clusterv1.Machine) map[string]string {
	f.t.Helper()
	stored := &clusterv1.Machine{}
	if err := f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored); err != nil {
		f.t.Fatalf("read Machine %s: %v", m.Name, err)
	}
	return stored.Annotations
}

// healthCheck creates a MachineHealthCheck of cluster c1 selecting the Machines
// whose labels match (all of c1's Machines for nil).
func (f *fixture) healthCheck(name string, match map[string]string) {
	f.t.Helper()
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: "c1",
			Selector:    metav1.LabelSelector{MatchLabels: match},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To[int32](300)},
			}},
		},
	}
	if match == nil {
		mhc.Spec.Selector.MatchLabels = map[string]string{clusterv1.ClusterNameLabel: "c1"}
	}
	if err := f.mgmt.Create(f.ctx, mhc); err != nil {
		f.t.Fatalf("create MachineHealthCheck %s: %v", name, err)
	}
}

// TestMHCHeldDuringUpdate: from the first call that cordons the
// node until the update's end (success, rollback, Degraded, not picked up) the stored
// Machine carries Cluster API's skip-remediation, and only then; an operator's own
// skip-remediation outlives the update.
func TestMHCHeldDuringUpdate(t *testing.T) {
	type ending struct {
		name   string
		report func(f *fixture, node, hash string)
		status runtimehooksv1.ResponseStatus
	}
	endings := []ending{
		{"Succeeded", func(f *fixture, node, hash string) {
			f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)
			f.setKubelet(node, "v1.36.0")
		}, runtimehooksv1.ResponseStatusSuccess},
		{"RolledBack", func(f *fixture, node, hash string) {
			f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Reason: "GateFailed"}, false)
		}, runtimehooksv1.ResponseStatusFailure},
		{"Degraded", func(f *fixture, node, hash string) {
			f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseFailed, Reason: protocol.ReasonRollbackFailed}, false)
		}, runtimehooksv1.ResponseStatusFailure},
	}
	for _, operatorSkip := range []bool{false, true} {
		for _, e := range endings {
			name := e.name
			if operatorSkip {
				name += "/operator-skip"
			}
			t.Run(name, func(t *testing.T) {
				g := NewWithT(t)
				f := newFixture(t, nil)
				f.healthCheck("all", nil)
				node := "mhc-" + map[string]string{"Succeeded": "ok", "RolledBack": "rb", "Degraded": "dg"}[e.name]
				if operatorSkip {
					node += "-op"
				}
				f.node(node, "v1.35.0", false)
				f.node(node+"-peer", "v1.35.0", false)
				m := f.machine("m-"+node, node, "v1.36.0", false)
				if operatorSkip {
					before := m.DeepCopy()
					m.Annotations[skipKey] = "operator"
					g.Expect(f.mgmt.Patch(f.ctx, m, client.MergeFrom(before))).To(Succeed())
				}
				machineAnn := func() map[string]string { return f.machineAnnotations(m) }
				req := f.request(m, &bootstrapv1.KubeadmConfig{})
				c := f.coordinator()

				call(c, req)
				g.Expect(f.getNode(node).Spec.Unschedulable).To(BeTrue())
				if operatorSkip {
					g.Expect(machineAnn()).To(HaveKeyWithValue(skipKey, "operator"))
					g.Expect(machineAnn()).NotTo(HaveKey(heldKey))
				} else {
					g.Expect(machineAnn()).To(HaveKeyWithValue(skipKey, remediationHeldValue), "held from the call that cordons")
					g.Expect(machineAnn()).To(HaveKeyWithValue(heldKey, remediationHeldValue))
				}
				callUntil(t, c, req, "pick up plan", 3)
				hash := f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
				g.Expect(machineAnn()).To(HaveKey(skipKey), "held while the agent works")

				e.report(f, node, hash)
				for range 2 { // the end, and a repeated call after it
					g.Expect(call(c, req).Status).To(Equal(e.status))
				}
				if operatorSkip {
					g.Expect(machineAnn()).To(HaveKeyWithValue(skipKey, "operator"), "the operator's skip-remediation stays")
				} else {
					g.Expect(machineAnn()).NotTo(HaveKey(skipKey), "released when the update ends")
				}
				g.Expect(machineAnn()).NotTo(HaveKey(heldKey))
				g.Expect(machineAnn()).To(HaveKey(clusterv1.UpdateInProgressAnnotation), "CAPI's own annotations are untouched")
			})
		}
	}
}

// TestMHCNotHeldUnlessStarted: a paused cluster's node is not
// updated, so its Machine stays under MachineHealthCheck; a plan the agent never
// picked up releases the hold with the withdrawal.
func TestMHCNotHeldUnlessStarted(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.healthCheck("all", nil)
	f.node("mhc-pk", "v1.35.0", false)
	f.node("mhc-pk-peer", "v1.35.0", false)
	m := f.machine("m-mhc-pk", "mhc-pk", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	cluster := &clusterv1.Cluster{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c1"}, cluster)).To(Succeed())
	before := cluster.DeepCopy()
	if cluster.Annotations == nil {
		cluster.Annotations = map[string]string{}
	}
	cluster.Annotations[inplacev1.PausedAnnotation] = "true"
	g.Expect(f.mgmt.Patch(f.ctx, cluster, client.MergeFrom(before))).To(Succeed())
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	c := f.coordinator(func(o *Options) { o.Now = func() time.Time { return now } })
	g.Expect(call(c, req).Message).To(ContainSubstring("paused"))
	machineAnn := func() map[string]string { return f.machineAnnotations(m) }
	g.Expect(machineAnn()).NotTo(HaveKey(skipKey), "not started: not held")
	g.Expect(f.getNode("mhc-pk").Spec.Unschedulable).To(BeFalse())

	before = cluster.DeepCopy()
	delete(cluster.Annotations, inplacev1.PausedAnnotation)
	g.Expect(f.mgmt.Patch(f.ctx, cluster, client.MergeFrom(before))).To(Succeed())
	callUntil(t, c, req, "pick up plan", 3)
	g.Expect(machineAnn()).To(HaveKey(skipKey))
	now = now.Add(30 * time.Second) // CAPI's next calls date the pick-up (phaseQuietWindow)
	call(c, req)
	now = now.Add(10 * time.Minute)
	g.Expect(call(c, req).Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(f.getNode("mhc-pk").Spec.Unschedulable).To(BeFalse(), "plan withdrawn, node back in service")
	g.Expect(machineAnn()).NotTo(HaveKey(skipKey), "and back under MachineHealthCheck")
	g.Expect(machineAnn()).NotTo(HaveKey(heldKey))
}

// TestMHCHoldOnlyWhenWatched: a Machine no MachineHealthCheck selects is updated
// without the hold (one of the namespace's health checks selects other Machines),
// and a MachineHealthCheck created while the agent works puts the hold on at the
// next call, which the update's end lifts.
func TestMHCHoldOnlyWhenWatched(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.healthCheck("other-pool", map[string]string{clusterv1.MachineDeploymentNameLabel: "md-other"})
	f.node("mhc-w", "v1.35.0", false)
	f.node("mhc-w-peer", "v1.35.0", false)
	m := f.machine("m-mhc-w", "mhc-w", "v1.36.0", false)
	machineAnn := func() map[string]string { return f.machineAnnotations(m) }
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	c := f.coordinator()

	call(c, req)
	g.Expect(f.getNode("mhc-w").Spec.Unschedulable).To(BeTrue(), "the update started")
	g.Expect(machineAnn()).NotTo(HaveKey(skipKey), "no MachineHealthCheck selects the Machine: no hold")
	callUntil(t, c, req, "pick up plan", 3)
	g.Expect(machineAnn()).NotTo(HaveKey(heldKey))

	f.healthCheck("late", nil)
	call(c, req)
	g.Expect(machineAnn()).To(HaveKeyWithValue(skipKey, remediationHeldValue), "held from the call after the MachineHealthCheck appeared")
	g.Expect(machineAnn()).To(HaveKeyWithValue(heldKey, remediationHeldValue))

	hash := f.getNode("mhc-w").Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports("mhc-w", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)
	f.setKubelet("mhc-w", "v1.36.0")
	g.Expect(call(c, req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(machineAnn()).NotTo(HaveKey(skipKey), "released when the update ends")
	g.Expect(machineAnn()).NotTo(HaveKey(heldKey))
}
