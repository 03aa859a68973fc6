package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// switchableClusters is a workload cluster whose API server can be taken away.
type switchableClusters struct {
	StaticClusters
	down *atomic.Bool
}

func (s switchableClusters) Get(ctx context.Context, key client.ObjectKey) (*WorkloadCluster, error) {
	if s.down.Load() {
		return nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	}
	return s.StaticClusters.Get(ctx, key)
}

// deadlineFixture: a worker whose Machine a MachineHealthCheck watches, updated
// by a coordinator on a clock the test moves, through a workload API that can go
// away.
type deadlineFixture struct {
	*fixture
	c     *Coordinator
	req   *runtimehooksv1.UpdateMachineRequest
	m     *clusterv1.Machine
	now   *atomic.Int64
	down  *atomic.Bool
	start time.Time
}

func newDeadlineFixture(t *testing.T, node string, mutate ...func(*Options)) *deadlineFixture {
	t.Helper()
	f := newFixture(t, nil)
	f.node(node, "v1.35.0", false)
	f.node(node+"-peer", "v1.35.0", false)
	f.healthCheck("mhc", nil)
	d := &deadlineFixture{fixture: f, now: &atomic.Int64{}, down: &atomic.Bool{}, start: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	d.now.Store(d.start.Unix())
	d.c = f.coordinator(append([]func(*Options){func(o *Options) {
		o.Now = func() time.Time { return time.Unix(d.now.Load(), 0).UTC() }
		o.Clusters = switchableClusters{StaticClusters: StaticClusters{Cluster: f.wc}, down: d.down}
	}}, mutate...)...)
	d.m = f.machine("m-"+node, node, "v1.36.0", false)
	d.req = f.request(d.m, &bootstrapv1.KubeadmConfig{})
	return d
}

func (d *deadlineFixture) at(after time.Duration) { d.now.Store(d.start.Add(after).Unix()) }

// TestRebootDeadlineReleasesTheNodeToMHC: the agent announces a reboot and never
// reports again (the new kubelet or OS image cannot run it). Past the rebooting
// deadline the Machine says so (condition and Event, with the phase, since when
// and what was last seen), the hook answers Failure every call instead of "in
// progress" for ever, the node stays cordoned with the cause on it, the failure
// counts against the budget and the coordinator's skip-remediation is released so
// that the MachineHealthCheck can replace the node. Before, the update stayed in
// progress and the hold kept MachineHealthCheck away for good.
func TestRebootDeadlineReleasesTheNodeToMHC(t *testing.T) {
	g := NewWithT(t)
	d := newDeadlineFixture(t, "wd-rb")
	callUntil(t, d.c, d.req, "pick up plan", 3)
	g.Expect(d.machineAnnotations(d.m)).To(HaveKey(clusterv1.MachineSkipRemediationAnnotation))
	hash := d.getNode("wd-rb").Annotations[inplacev1.DesiredPlanAnnotation]

	d.agentReports("wd-rb", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRebooting, Step: 5, Steps: 9, Action: "reboot"}, false)
	d.at(time.Minute)
	g.Expect(call(d.c, d.req).Message).To(ContainSubstring("Rebooting (5/9 reboot)"))
	d.at(30 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), "within the deadline: %s", resp.Message)

	d.at(32 * time.Minute)
	want := "node wd-rb: phase Rebooting of plan " + hash[:12] + " passed its deadline of 30m0s (in it since 2026-12-04T10:01:00Z, judged at 2026-12-04T10:32:00Z); " +
		"last seen: agent status Rebooting (5/9 reboot); it stays cordoned"
	for range 2 {
		resp = call(d.c, d.req)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
		g.Expect(resp.Message).To(HavePrefix(want))
		d.at(40 * time.Minute)
	}
	cond := d.machineCondition(d.m)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDeadlineExceeded))
	g.Expect(cond.Message).To(HavePrefix(want))
	g.Expect(d.rec.reasons()).To(ContainElement(inplacev1.EventDeadlineExceeded))
	n := d.getNode("wd-rb")
	g.Expect(n.Spec.Unschedulable).To(BeTrue(), "a node the agent may be changing is never put back in service")
	g.Expect(n.Annotations[inplacev1.DeadlineExceededAnnotation]).To(ContainSubstring("phase Rebooting"))
	ann := d.machineAnnotations(d.m)
	g.Expect(ann).NotTo(HaveKey(clusterv1.MachineSkipRemediationAnnotation), "released to MachineHealthCheck")
	g.Expect(ann).NotTo(HaveKey(inplacev1.RemediationHeldByAnnotation))
	g.Expect(d.fleetState().Failures).To(HaveLen(1))
	g.Expect(d.fleetState().Failures[0].Cause).To(HavePrefix(string(CauseDeadlineExceeded)))

	// The agent comes back after all and commits: the node's own verdict wins.
	d.agentReports("wd-rb", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 9, Steps: 9}, true)
	d.setKubelet("wd-rb", "v1.36.0")
	resp = call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
	n = d.getNode("wd-rb")
	g.Expect(n.Spec.Unschedulable).To(BeFalse())
	g.Expect(n.Annotations).NotTo(HaveKey(inplacev1.DeadlineExceededAnnotation))
}

// TestDeadlineKeepsTheHoldByPolicy: with deadlines.keepRemediationHold the
// Machine keeps skip-remediation past the deadline and the metric behind the
// CapiInplaceRemediationHeld alert says so.
func TestDeadlineKeepsTheHoldByPolicy(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	d := newDeadlineFixture(t, "wd-kh", func(o *Options) {
		o.Deadlines.KeepRemediationHold = true
		o.Deadlines.Applying = 20 * time.Minute
		m, err := NewPrometheusMetrics(reg, MetricsOptions{Now: o.Now})
		if err != nil {
			t.Fatal(err)
		}
		o.Metrics = m
	})
	callUntil(t, d.c, d.req, "pick up plan", 3)
	hash := d.getNode("wd-kh").Annotations[inplacev1.DesiredPlanAnnotation]
	d.agentReports("wd-kh", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 3, Steps: 9, Action: "kubeadm-upgrade", Reason: protocol.ReasonDiskFull}, false)
	d.at(time.Minute)
	call(d.c, d.req)
	d.at(22 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("last seen: agent status Applying (3/9 kubeadm-upgrade), DiskFull"))
	g.Expect(d.machineAnnotations(d.m)).To(HaveKeyWithValue(clusterv1.MachineSkipRemediationAnnotation, remediationHeldValue))
	g.Expect(d.getNode("wd-kh").Spec.Unschedulable).To(BeTrue())
	labels := map[string]string{"cluster": d.ns + "/c1", "node": "wd-kh"}
	got := scrape(t, reg)
	g.Expect(got.value("capi_inplace_node_remediation_held", labels)).To(Equal(1.0))
	g.Expect(got.value("capi_inplace_node_deadline_exceeded", map[string]string{"cluster": d.ns + "/c1", "node": "wd-kh", "phase": "Applying"})).To(Equal(1.0))
}

// TestPoolDeadlines: the deadlines of the Machine's pool (the policy's
// deadlines.pools) time its update, not the section's: the applying deadline of
// the cluster's pool (5 min, where the section gives an hour) fails it, and the
// pool keeps the remediation hold the section would release.
func TestPoolDeadlines(t *testing.T) {
	g := NewWithT(t)
	pol, err := policy.Parse([]byte(`
deadlines:
  pools:
  - machineSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: other}}
    applyingSeconds: 60
  - machineSelector: {matchLabels: {cluster.x-k8s.io/cluster-name: c1}}
    applyingSeconds: 300
    keepRemediationHold: true
`))
	g.Expect(err).NotTo(HaveOccurred())
	d := newDeadlineFixture(t, "wd-pl", func(o *Options) { o.PoolDeadlines = pol })
	callUntil(t, d.c, d.req, "pick up plan", 3)
	hash := d.getNode("wd-pl").Annotations[inplacev1.DesiredPlanAnnotation]
	d.agentReports("wd-pl", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 3, Steps: 9, Action: "kubeadm-upgrade"}, false)
	d.at(time.Minute)
	call(d.c, d.req)
	d.at(4 * time.Minute)
	g.Expect(call(d.c, d.req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), "within the pool's deadline")

	d.at(7 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("phase Applying of plan " + hash[:12] + " passed its deadline of 5m0s"))
	g.Expect(d.machineCondition(d.m).Reason).To(Equal(inplacev1.ReasonDeadlineExceeded))
	g.Expect(d.machineAnnotations(d.m)).To(HaveKeyWithValue(clusterv1.MachineSkipRemediationAnnotation, remediationHeldValue),
		"the pool keeps the hold")
	g.Expect(d.getNode("wd-pl").Spec.Unschedulable).To(BeTrue())
}

// TestApplyingDeadlineWhileTheAPIServerNeverReturns: a single control plane whose
// API server does not come back (a power cut while an etcd restore parked its
// manifests) cannot report anything; the applying deadline still ends the update
// from the management side: Failure, the condition and the hold released, all
// without the workload API. Before, every call answered "waiting for the API
// server" for ever.
func TestApplyingDeadlineWhileTheAPIServerNeverReturns(t *testing.T) {
	g := NewWithT(t)
	d := newDeadlineFixture(t, "wd-ad")
	callUntil(t, d.c, d.req, "pick up plan", 3)
	hash := d.getNode("wd-ad").Annotations[inplacev1.DesiredPlanAnnotation]
	d.agentReports("wd-ad", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 4, Steps: 9, Action: "restore-etcd"}, false)
	d.at(time.Minute)
	call(d.c, d.req)

	d.down.Store(true)
	d.at(50 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.Message).To(ContainSubstring("waiting for a connection"))

	d.at(62 * time.Minute)
	resp = call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("phase Applying of plan " + hash[:12] + " passed its deadline of 1h0m0s"))
	g.Expect(resp.Message).To(ContainSubstring("last seen: agent status Applying (4/9 restore-etcd); the workload cluster's API server does not answer"))
	cond := d.machineCondition(d.m)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Reason).To(Equal(inplacev1.ReasonDeadlineExceeded))
	g.Expect(d.machineAnnotations(d.m)).NotTo(HaveKey(clusterv1.MachineSkipRemediationAnnotation))
	g.Expect(d.fleetState().Failures).To(HaveLen(1))
	g.Expect(d.getNode("wd-ad").Spec.Unschedulable).To(BeTrue())
}

// TestPickupTimerPausesDuringAnOutage: the workload API goes away right after the
// plan is published and comes back twenty minutes later. The time it was away
// does not count against the agent's pick-up deadline: the plan is not withdrawn
// as "not picked up" (a sticky failure counted against the budget) on the first
// call after the outage; the deadline still ends an agent that never answers.
func TestPickupTimerPausesDuringAnOutage(t *testing.T) {
	g := NewWithT(t)
	d := newDeadlineFixture(t, "wd-po")
	callUntil(t, d.c, d.req, "pick up plan", 3)
	d.at(40 * time.Second)
	g.Expect(call(d.c, d.req).Message).To(ContainSubstring("pick up plan"))

	d.down.Store(true)
	for _, at := range []time.Duration{time.Minute, 10 * time.Minute, 20 * time.Minute} {
		d.at(at)
		g.Expect(call(d.c, d.req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	}
	d.down.Store(false)
	d.at(21 * time.Minute)
	resp := call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
	g.Expect(resp.Message).To(ContainSubstring("pick up plan"))
	g.Expect(d.getNode("wd-po").Annotations).NotTo(HaveKey(inplacev1.PlanNotPickedUpAnnotation))
	g.Expect(d.fleetState().Failures).To(BeEmpty())

	d.at(24 * time.Minute)
	g.Expect(call(d.c, d.req).Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	d.at(27 * time.Minute)
	resp = call(d.c, d.req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.Message).To(ContainSubstring("did not pick up plan"))
	g.Expect(d.getNode("wd-po").Spec.Unschedulable).To(BeFalse())
}
