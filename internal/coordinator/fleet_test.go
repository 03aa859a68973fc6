package coordinator

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// annotate sets (or, with value "-", removes) an annotation on a management object.
func (f *fixture) annotate(obj client.Object, key, value string) {
	f.t.Helper()
	g := NewWithT(f.t)
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	before := obj.DeepCopyObject().(client.Object)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if value == "-" {
		delete(ann, key)
	} else {
		ann[key] = value
	}
	obj.SetAnnotations(ann)
	g.Expect(f.mgmt.Patch(f.ctx, obj, client.MergeFrom(before))).To(Succeed())
}

func (f *fixture) cluster() *clusterv1.Cluster {
	f.t.Helper()
	c := &clusterv1.Cluster{}
	if err := f.mgmt.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c1"}, c); err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) fleetState() fleet.State {
	f.t.Helper()
	st, err := fleet.Decode(f.cluster().Annotations[inplacev1.FleetStateAnnotation])
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fixture) clusterCondition() *string {
	cond := meta.FindStatusCondition(f.cluster().Status.Conditions, inplacev1.InPlaceUpdateCondition)
	if cond == nil {
		return nil
	}
	s := cond.Reason + ": " + cond.Message
	return &s
}

// rollBack plays the agent rolling the node's published plan back.
func (f *fixture) rollBack(c *Coordinator, req *runtimehooksv1.UpdateMachineRequest, node string) string {
	f.t.Helper()
	callUntil(f.t, c, req, "pick up plan", 3)
	hash := f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Steps: 6, Step: 4,
		Reason: "GateFailed", Message: "gate lane-health did not pass"}, false)
	resp := call(c, req)
	if resp.Status != runtimehooksv1.ResponseStatusFailure {
		f.t.Fatalf("after the rollback: %s %q", resp.Status, resp.Message)
	}
	return hash
}

// TestFailureBudgetHaltsAndResumes: a rolled-back node spends the cluster's default
// budget of 1; the next node is held before cordon with the budget's message, and
// stays untouched across calls and a coordinator restart; one annotation on the
// Cluster resumes.
func TestFailureBudgetHaltsAndResumes(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("fb-w1", "v1.35.0", false)
	f.node("fb-w2", "v1.35.0", false)
	m1 := f.machine("m-fb-w1", "fb-w1", "v1.36.0", false)
	m2 := f.machine("m-fb-w2", "fb-w2", "v1.36.0", false)
	req1, req2 := f.request(m1, nil), f.request(m2, nil)
	c := f.coordinator()

	f.rollBack(c, req1, "fb-w1")
	st := f.fleetState()
	g.Expect(st.Failures).To(HaveLen(1))
	g.Expect(st.Failures[0].Node).To(Equal("fb-w1"))
	g.Expect(st.Failures[0].Cause).To(Equal("RolledBack: GateFailed"))
	call(c, req1) // repeated Failure answers count once
	g.Expect(f.fleetState().Failures).To(HaveLen(1))

	want := "step 1/6: halted: 1 of 1 failures allowed (node fb-w1: RolledBack: GateFailed); node fb-w2 not started (annotate the Cluster with inplace.capi-inplace.dev/resume to continue)"
	for _, cc := range []*Coordinator{c, f.coordinator()} { // a restarted coordinator decides alike
		resp := call(cc, req2)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
		g.Expect(resp.RetryAfterSeconds).To(Equal(int32(15)))
		g.Expect(resp.Message).To(Equal(want))
	}
	n2 := f.getNode("fb-w2")
	g.Expect(n2.Spec.Unschedulable).To(BeFalse(), "held before cordon")
	g.Expect(n2.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(n2.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(*f.clusterCondition()).To(HavePrefix(inplacev1.ReasonHalted + ": halted: 1 of 1"))
	g.Expect(strings.Count(strings.Join(f.rec.reasons(), " "), inplacev1.EventUpdatesHalted)).To(Equal(1), "one Event per transition")

	f.annotate(f.cluster(), inplacev1.ResumeAnnotation, "true")
	callUntil(t, c, req2, "pick up plan", 3)
	g.Expect(f.getNode("fb-w2").Spec.Unschedulable).To(BeTrue())
	g.Expect(f.cluster().Annotations).NotTo(HaveKey(inplacev1.ResumeAnnotation))
	g.Expect(f.fleetState().Failures).To(BeEmpty())
	g.Expect(*f.clusterCondition()).To(Equal(inplacev1.ReasonActive + ": " + activeMessage))
	g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventUpdatesResumed))
}

// TestRetryAnnotation: one annotation on the Machine retries a rolled-back node:
// the failed plan and the agent's verdict are cleared, the failure leaves the
// budget, the annotation goes, and the next call starts the update again.
func TestRetryAnnotation(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("rt-w1", "v1.35.0", false)
	f.node("rt-peer", "v1.35.0", false)
	m := f.machine("m-rt-w1", "rt-w1", "v1.36.0", false)
	req := f.request(m, nil)
	c := f.coordinator()
	hash := f.rollBack(c, req, "rt-w1")
	g.Expect(f.fleetState().Failures).To(HaveLen(1))

	f.annotate(m, inplacev1.RetryAnnotation, "true")
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(HavePrefix("step 1/6: retrying node rt-w1: the failed plan " + hash[:12] + " was withdrawn"))
	n := f.getNode("rt-w1")
	for _, k := range []string{inplacev1.DesiredPlanAnnotation, inplacev1.StatusAnnotation, inplacev1.StateAnnotation} {
		g.Expect(n.Annotations).NotTo(HaveKey(k))
	}
	g.Expect(f.fleetState().Failures).To(BeEmpty())
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	g.Expect(stored.Annotations).NotTo(HaveKey(inplacev1.RetryAnnotation))

	resp = callUntil(t, c, req, "pick up plan", 3)
	g.Expect(resp.Message).To(Equal("step 5/6: waiting for the agent on node rt-w1 to pick up plan " + hash[:12]))
	g.Expect(f.getNode("rt-w1").Spec.Unschedulable).To(BeTrue())

	// Retry of an update that did not fail changes nothing but the annotation.
	f.annotate(m, inplacev1.RetryAnnotation, "true")
	g.Expect(call(c, req).Message).To(Equal(resp.Message))
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	g.Expect(stored.Annotations).NotTo(HaveKey(inplacev1.RetryAnnotation))
	g.Expect(f.rec.reasons()).To(ContainElement(inplacev1.EventNothingToRetry))
}

// TestCancelAnnotation: a cancel before the agent acts withdraws the plan and
// uncordons; Failure (Cancelled) while the annotation stays; removing it starts
// again; once the agent is applying, cancel is too late and the update runs on.
func TestCancelAnnotation(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cx-w1", "v1.35.0", false)
	f.node("cx-peer", "v1.35.0", false)
	m := f.machine("m-cx-w1", "cx-w1", "v1.36.0", false)
	req := f.request(m, nil)
	c := f.coordinator()
	callUntil(t, c, req, "pick up plan", 3)
	hash := f.getNode("cx-w1").Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(f.getNode("cx-w1").Spec.Unschedulable).To(BeTrue())

	f.annotate(m, inplacev1.CancelAnnotation, "true")
	for range 2 {
		resp := call(c, req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(ContainSubstring("node cx-w1: update cancelled by annotation " + inplacev1.CancelAnnotation))
	}
	n := f.getNode("cx-w1")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	g.Expect(meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition).Reason).To(Equal(inplacev1.ReasonCancelled))
	g.Expect(strings.Count(strings.Join(f.rec.reasons(), " "), inplacev1.EventUpdateCancelled)).To(Equal(1))
	g.Expect(f.fleetState().Failures).To(BeEmpty(), "a cancel is not a failure")
	g.Expect(stored.Annotations).NotTo(HaveKey(clusterv1.MachineSkipRemediationAnnotation), "the remediation hold is lifted with the cancel")

	f.annotate(m, inplacev1.CancelAnnotation, "-")
	callUntil(t, c, req, "pick up plan", 3)
	g.Expect(f.getNode("cx-w1").Spec.Unschedulable).To(BeTrue())

	f.agentReports("cx-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Steps: 6, Step: 2, Action: "kubeadm-upgrade"}, false)
	f.annotate(m, inplacev1.CancelAnnotation, "true")
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("to apply plan"))
	g.Expect(resp.Message).To(HaveSuffix("; cancel by annotation " + inplacev1.CancelAnnotation + " came too late: the agent is at work on the node (Applying) and cannot be stopped safely, so the update runs on"))
	g.Expect(f.getNode("cx-w1").Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
}

// TestMaintenanceWindowHoldsBeforeCordon: outside the Cluster's window the node
// is held, untouched, with the next opening; inside it starts.
func TestMaintenanceWindowHoldsBeforeCordon(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("mw-w1", "v1.35.0", false)
	f.node("mw-peer", "v1.35.0", false)
	m := f.machine("m-mw-w1", "mw-w1", "v1.36.0", false)
	req := f.request(m, nil)
	f.annotate(f.cluster(), inplacev1.MaintenanceWindowsAnnotation, "Sat 02:00-06:00 Europe/Berlin")
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // Tuesday
	c := f.coordinator(func(o *Options) { o.Now = func() time.Time { return now } })

	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(Equal("step 1/6: waiting for a maintenance window: the maintenance window is closed; next opening 2026-12-05T01:00:00Z; node mw-w1 not started"))
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(15)))
	n := f.getNode("mw-w1")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.UpdateStartedAnnotation))
	g.Expect(*f.clusterCondition()).To(HavePrefix(inplacev1.ReasonWindowClosed + ":"))

	// Inside the window, but the default expected 30 min do not fit before 06:00.
	now = time.Date(2026, 12, 5, 4, 45, 0, 0, time.UTC)
	g.Expect(call(c, req).Message).To(ContainSubstring("closes at 2026-12-05T05:00:00Z, before the expected 30m0s"))
	g.Expect(f.getNode("mw-w1").Spec.Unschedulable).To(BeFalse())

	now = time.Date(2026, 12, 5, 1, 30, 0, 0, time.UTC)
	callUntil(t, c, req, "pick up plan", 3)
	g.Expect(f.getNode("mw-w1").Spec.Unschedulable).To(BeTrue())

	// Once started, a closing window does not strand the update mid-way.
	now = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	g.Expect(call(c, req).Message).To(ContainSubstring("pick up plan"))
}

// TestPauseIsVisibleOnTheCluster: the paused opt-in holds the node and says so in
// the Cluster's condition, with one Event.
func TestPauseIsVisibleOnTheCluster(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("pz-w1", "v1.35.0", false)
	m := f.machine("m-pz-w1", "pz-w1", "v1.36.0", false)
	req := f.request(m, nil)
	f.annotate(f.cluster(), inplacev1.PausedAnnotation, "true")
	c := f.coordinator()
	for range 2 {
		g.Expect(call(c, req).Message).To(ContainSubstring("cluster is paused"))
	}
	g.Expect(f.getNode("pz-w1").Spec.Unschedulable).To(BeFalse())
	g.Expect(*f.clusterCondition()).To(HavePrefix(inplacev1.ReasonPaused + ":"))
	g.Expect(strings.Count(strings.Join(f.rec.reasons(), " "), inplacev1.EventUpdatesPaused)).To(Equal(1))
}

// TestFailureBudgetResetsWhenTheSpecChanges: the failure counts while its
// MachineDeployment's template is the one it failed with; scaling keeps it, a new
// template (a new rollout) resets the budget.
func TestFailureBudgetResetsWhenTheSpecChanges(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "md-0"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "c1",
			Replicas:    ptr.To[int32](2),
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}},
				Spec: clusterv1.MachineSpec{
					ClusterName: "c1", Version: "v1.36.0",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachineTemplate", Name: "t1"},
				},
			},
		},
	}
	g.Expect(f.mgmt.Create(f.ctx, md)).To(Succeed())
	f.node("rs-w1", "v1.35.0", false)
	f.node("rs-w2", "v1.35.0", false)
	m1 := f.machine("m-rs-w1", "rs-w1", "v1.36.0", false)
	m2 := f.machine("m-rs-w2", "rs-w2", "v1.36.0", false)
	for _, m := range []*clusterv1.Machine{m1, m2} {
		before := m.DeepCopy()
		m.Labels[clusterv1.MachineDeploymentNameLabel] = "md-0"
		g.Expect(f.mgmt.Patch(f.ctx, m, client.MergeFrom(before))).To(Succeed())
	}
	req1, req2 := f.request(m1, nil), f.request(m2, nil)
	c := f.coordinator()
	f.rollBack(c, req1, "rs-w1")
	g.Expect(f.fleetState().Failures[0].Owner).To(Equal("MachineDeployment/md-0"))
	g.Expect(call(c, req2).Message).To(ContainSubstring("halted: 1 of 1 failures allowed"))

	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
	md.Spec.Replicas = ptr.To[int32](3)
	g.Expect(f.mgmt.Update(f.ctx, md)).To(Succeed())
	g.Expect(call(c, req2).Message).To(ContainSubstring("halted: 1 of 1 failures allowed"), "scaling is not a new spec")

	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(md), md)).To(Succeed())
	md.Spec.Template.Spec.Version = "v1.36.1"
	g.Expect(f.mgmt.Update(f.ctx, md)).To(Succeed())
	callUntil(t, c, req2, "pick up plan", 3)
	g.Expect(f.getNode("rs-w2").Spec.Unschedulable).To(BeTrue())
}

// TestCancelLosesToAPickUp: the coordinator decided to cancel from a read of the
// Node that predates the agent's claim of the plan. The cancel is conditional on
// that read, so it conflicts and changes nothing (the node stays cordoned with its
// plan, the answer is in progress), and the next call sees the agent at work and
// lets the update run on. Before, the cancel landed anyway: it withdrew the plan
// and uncordoned a node the agent had begun changing.
func TestCancelLosesToAPickUp(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cr-w1", "v1.35.0", false)
	f.node("cr-peer", "v1.35.0", false)
	m := f.machine("m-cr-w1", "cr-w1", "v1.36.0", false)
	req := f.request(m, nil)
	c := f.coordinator()
	callUntil(t, c, req, "pick up plan", 3)
	stale := f.getNode("cr-w1")
	hash := stale.Annotations[inplacev1.DesiredPlanAnnotation]
	g.Expect(hash).NotTo(BeEmpty())
	g.Expect(stale.Spec.Unschedulable).To(BeTrue())

	// The agent claims the plan after the coordinator's read, then starts its work.
	f.agentReports("cr-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhasePending}, false)
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	out, held := c.cancel(f.ctx, &scope{wc: f.wc, node: stale, stored: stored, planHash: hash}, Observation{}, Decision{Action: ActWait})
	g.Expect(held).To(BeTrue())
	g.Expect(out.Kind).To(Equal(OutcomeInProgress), "a lost race is not an answer: %+v", out)
	g.Expect(out.Message).To(ContainSubstring("concurrent change"))
	n := f.getNode("cr-w1")
	g.Expect(n.Spec.Unschedulable).To(BeTrue())
	g.Expect(n.Annotations).To(HaveKeyWithValue(inplacev1.DesiredPlanAnnotation, hash))
	g.Expect(n.Annotations).To(HaveKey(inplacev1.CordonedByAnnotation))
	g.Expect(f.rec.reasons()).NotTo(ContainElement(inplacev1.EventUpdateCancelled))

	f.agentReports("cr-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Steps: 6, Step: 2, Action: "kubeadm-upgrade"}, false)
	f.annotate(m, inplacev1.CancelAnnotation, "true")
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("to apply plan"))
	g.Expect(f.getNode("cr-w1").Spec.Unschedulable).To(BeTrue())
}

// TestFleetRecordWriteRetriesAConflict: nodes of a pool finish at once and all write
// the Cluster's fleet record; a write that lost the optimistic lock re-reads the
// Cluster and applies its entry again within the call (it used to answer "in
// progress" and cost the node a retry interval), keeping what the winner wrote.
func TestFleetRecordWriteRetriesAConflict(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	c := f.coordinator()
	stale := f.cluster()
	staleRV := stale.ResourceVersion
	// Another call's write lands between this call's read and its write.
	winner := &scope{cluster: f.cluster(), clusterKey: client.ObjectKeyFromObject(stale)}
	g.Expect(c.patchClusterState(f.ctx, winner, func(st *fleet.State, _ map[string]string) {
		st.RecordFinished("workers", "w1", "plan-1", time.Now().Truncate(time.Second), time.Minute)
	})).To(Succeed())
	loser := &scope{cluster: stale, clusterKey: client.ObjectKeyFromObject(stale)}
	applied := 0
	g.Expect(c.patchClusterState(f.ctx, loser, func(st *fleet.State, _ map[string]string) {
		applied++
		st.RecordFinished("workers", "w2", "plan-2", time.Now().Truncate(time.Second), 2*time.Minute)
	})).To(Succeed())
	g.Expect(applied).To(Equal(2), "the first write conflicted and the entry was applied again to the fresh record")
	g.Expect(loser.cluster.ResourceVersion).NotTo(Equal(staleRV), "the scope holds the Cluster as written")
	st := f.fleetState()
	g.Expect(st.DurationsSeconds).To(ConsistOf(int64(60), int64(120)), "both calls' durations are on the record")
	g.Expect(f.cluster().Annotations[inplacev1.FleetStateAnnotation]).To(And(ContainSubstring("w2"), ContainSubstring("plan-2")))
}

// TestRecordsFinished: a finished node is recorded on the Cluster only where the fleet
// gate reads it (maintenance windows for the durations, a soak for the last node).
func TestRecordsFinished(t *testing.T) {
	windows, err := fleet.ParseWindows("Mon 08:00-10:00 UTC")
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	annotated := &clusterv1.Cluster{}
	annotated.Annotations = map[string]string{inplacev1.MaintenanceWindowsAnnotation: "Mon 08:00-10:00 UTC"}
	for _, tt := range []struct {
		name    string
		pool    fleet.Pool
		cluster *clusterv1.Cluster
		want    bool
	}{
		{"default pool, no windows, no soak", fleet.DefaultPool(), &clusterv1.Cluster{}, false},
		{"soak", fleet.Pool{Soak: time.Minute}, &clusterv1.Cluster{}, true},
		{"policy windows", fleet.Pool{Windows: windows}, &clusterv1.Cluster{}, true},
		{"the Cluster's windows annotation", fleet.DefaultPool(), annotated, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(recordsFinished(tt.pool, tt.cluster)).To(Equal(tt.want))
		})
	}
}

// TestUpdateNodeCancelAnnotation: the single-node controller's in-process entry
// honours the Machine's cancel annotation as the hook does: before the agent acts,
// the plan is withdrawn, the node uncordoned, and the typed answer is a final
// Failure of cause Cancelled (the controller keeps the hold and records no
// failure on it); without the annotation the update starts again.
func TestUpdateNodeCancelAnnotation(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cn-cp", "v1.35.0", false)
	m := f.machine("m-cn-cp", "cn-cp", "v1.36.0", false)
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
	stored.Annotations = nil // the single-node path sets no CAPI marks
	g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
	c := f.coordinator()
	req := f.request(m, nil)
	bootstrap, err := toUnstructured(req.Desired.BootstrapConfig)
	g.Expect(err).NotTo(HaveOccurred())
	infra, err := toUnstructured(req.Desired.InfrastructureMachine)
	g.Expect(err).NotTo(HaveOccurred())
	desired := DesiredNode{Machine: &req.Desired.Machine, BootstrapConfig: bootstrap, InfrastructureMachine: infra}
	untilPublished := func() {
		t.Helper()
		for range 5 {
			out := c.UpdateNode(f.ctx, desired)
			g.Expect(out.Kind).To(Equal(OutcomeInProgress), out.Message)
			if strings.Contains(out.Message, "pick up plan") {
				return
			}
		}
		t.Fatal("the plan was not published")
	}
	untilPublished()
	g.Expect(f.getNode("cn-cp").Spec.Unschedulable).To(BeTrue())

	f.annotate(m, inplacev1.CancelAnnotation, "true")
	for range 2 {
		out := c.UpdateNode(f.ctx, desired)
		g.Expect(out.Kind).To(Equal(OutcomeFailedFinal), out.Message)
		g.Expect(out.Cause).To(Equal(CauseCancelled))
		g.Expect(out.Message).To(ContainSubstring("update cancelled by annotation " + inplacev1.CancelAnnotation))
	}
	n := f.getNode("cn-cp")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DesiredPlanAnnotation))
	g.Expect(f.fleetState().Failures).To(BeEmpty(), "a cancel is not a failure")

	f.annotate(m, inplacev1.CancelAnnotation, "-")
	untilPublished()
	g.Expect(f.getNode("cn-cp").Spec.Unschedulable).To(BeTrue())
}
