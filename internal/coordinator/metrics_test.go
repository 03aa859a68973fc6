package coordinator

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// scraped is one registry's gathered families, read by name and labels.
type scraped map[string]*dto.MetricFamily

func scrape(t *testing.T, reg *prometheus.Registry) scraped {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := scraped{}
	for _, f := range families {
		out[f.GetName()] = f
	}
	return out
}

// find returns the series of name whose labels include want; nil when none.
func (s scraped) find(name string, want map[string]string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is the value of a counter or gauge series; -1 when it is absent.
func (s scraped) value(name string, labels map[string]string) float64 {
	m := s.find(name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// histogram is the count and sum of a histogram series; count -1 when absent.
func (s scraped) histogram(name string, labels map[string]string) (uint64, float64, bool) {
	m := s.find(name, labels)
	if m == nil || m.Histogram == nil {
		return 0, 0, false
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum(), true
}

// TestMetricsFollowNodeUpdates drives two node updates through the coordinator
// against the real API server, with the metrics on a real registry, and reads the
// registry after every transition: cordon and a drain blocked by a PDB, the plan
// published, the update done (step durations from the node's own timestamps), a
// rollback, and the cluster paused.
func TestMetricsFollowNodeUpdates(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("mw1", "v1.35.0", false)
	f.node("mw2", "v1.35.0", false)
	f.node("mw-metrics-peer", "v1.35.0", false)
	app := map[string]string{"app": "metrics-web"}
	f.pod("metrics-web-1", "mw1", app, controllerRef("ReplicaSet", "web", "31111111-1111-1111-1111-111111111111"), nil)
	f.blockingPDB("web-pdb", app)

	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reg := prometheus.NewRegistry()
	pm, err := NewPrometheusMetrics(reg, MetricsOptions{Now: clock})
	g.Expect(err).NotTo(HaveOccurred())
	c := f.coordinator(func(o *Options) { o.Now = clock; o.Metrics = pm })
	cluster := f.ns + "/c1"
	node1 := map[string]string{"cluster": cluster, "node": "mw1"}

	// Nothing seen yet: the live gauges are empty.
	g.Expect(scrape(t, reg).value("capi_inplace_cluster_nodes_in_progress", map[string]string{"cluster": cluster})).To(Equal(-1.0))

	// Cordon; the PDB refuses the eviction.
	req := f.request(f.machine("m-mw1", "mw1", "v1.36.0", false), nil)
	g.Expect(call(c, req).Message).To(ContainSubstring("eviction blocked by PodDisruptionBudget"))
	now = now.Add(10 * time.Second)
	call(c, req) // still blocked: cordoned once, not twice
	s := scrape(t, reg)
	g.Expect(s.value("capi_inplace_nodes_cordoned_total", nil)).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_node_update_started_timestamp_seconds", node1)).To(Equal(float64(now.Add(-10 * time.Second).Unix())))
	g.Expect(s.value("capi_inplace_node_cordoned_by_us_since_timestamp_seconds", node1)).To(Equal(float64(now.Add(-10 * time.Second).Unix())))
	g.Expect(s.value("capi_inplace_node_drain_blocked_seconds", map[string]string{"cluster": cluster, "node": "mw1", "pdb": f.ns + "/web-pdb"})).To(Equal(10.0))
	g.Expect(s.value("capi_inplace_cluster_nodes_in_progress", map[string]string{"cluster": cluster})).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_cluster_rollout_state", map[string]string{"cluster": cluster, "state": "active"})).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_cluster_rollout_state", map[string]string{"cluster": cluster, "state": "paused"})).To(Equal(0.0))
	g.Expect(s.value("capi_inplace_plans_published_total", nil)).To(Equal(0.0))

	// The budget goes: drained 30 s after the cordon, plan published once.
	g.Expect(f.wl.Delete(f.ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web-pdb"}})).To(Succeed())
	now = now.Add(20 * time.Second)
	callUntil(t, c, req, "pick up plan", 5)
	call(c, req)
	s = scrape(t, reg)
	g.Expect(s.value("capi_inplace_plans_published_total", nil)).To(Equal(1.0))
	count, sum, ok := s.histogram("capi_inplace_update_step_duration_seconds", map[string]string{"step": StepLabelDrain})
	g.Expect(ok).To(BeTrue())
	g.Expect(count).To(Equal(uint64(1)))
	g.Expect(sum).To(Equal(30.0))
	g.Expect(s.find("capi_inplace_node_drain_blocked_seconds", node1)).To(BeNil(), "the drain is no longer blocked")

	// The agent commits 60 s after publication; the kubelet reports the version 30 s later.
	hash, _ := func() (string, error) {
		p, err := openPlan(f.planSecret("mw1").Data[inplacev1.PlanSecretDataKey])
		g.Expect(err).NotTo(HaveOccurred())
		return p.Hash()
	}()
	f.agentReports("mw1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 4, Steps: 4,
		StartedAt: now.Add(5 * time.Second), UpdatedAt: now.Add(60 * time.Second)}, true)
	now = now.Add(90 * time.Second)
	f.setKubelet("mw1", "v1.36.0")
	g.Expect(call(c, req).RetryAfterSeconds).To(BeZero())
	call(c, req) // done again: counted once
	s = scrape(t, reg)
	g.Expect(s.value("capi_inplace_node_updates_total", map[string]string{"cluster": cluster, "outcome": OutcomeLabelDone})).To(Equal(1.0))
	count, sum, _ = s.histogram("capi_inplace_node_update_duration_seconds", map[string]string{"outcome": OutcomeLabelDone})
	g.Expect([]any{count, sum}).To(Equal([]any{uint64(1), 120.0}))
	_, sum, _ = s.histogram("capi_inplace_update_step_duration_seconds", map[string]string{"step": StepLabelApply})
	g.Expect(sum).To(Equal(60.0))
	_, sum, _ = s.histogram("capi_inplace_update_step_duration_seconds", map[string]string{"step": StepLabelVerify})
	g.Expect(sum).To(Equal(30.0))
	g.Expect(s.find("capi_inplace_node_update_started_timestamp_seconds", node1)).To(BeNil())
	g.Expect(s.find("capi_inplace_node_cordoned_by_us_since_timestamp_seconds", node1)).To(BeNil())
	g.Expect(s.value("capi_inplace_cluster_nodes_in_progress", map[string]string{"cluster": cluster})).To(Equal(0.0))

	// A second node rolls back.
	req2 := f.request(f.machine("m-mw2", "mw2", "v1.36.0", false), nil)
	callUntil(t, c, req2, "pick up plan", 5)
	p2, err := openPlan(f.planSecret("mw2").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	hash2, _ := p2.Hash()
	f.agentReports("mw2", protocol.NodeStatus{PlanHash: hash2, Phase: protocol.PhaseRolledBack, Step: 2, Steps: 4, Reason: "GateFailed", UpdatedAt: now}, false)
	for range 2 {
		g.Expect(call(c, req2).Status).To(BeEquivalentTo("Failure"))
	}
	s = scrape(t, reg)
	g.Expect(s.value("capi_inplace_node_updates_total", map[string]string{"cluster": cluster, "outcome": OutcomeLabelRolledBack})).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_node_updates_total", map[string]string{"cluster": cluster, "outcome": OutcomeLabelDone})).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_nodes_cordoned_total", nil)).To(Equal(2.0))

	// The operator pauses the cluster: the next call says so.
	f.annotate(f.cluster(), inplacev1.PausedAnnotation, "true")
	f.node("mw3", "v1.35.0", false)
	call(c, f.request(f.machine("m-mw3", "mw3", "v1.36.0", false), nil))
	s = scrape(t, reg)
	g.Expect(s.value("capi_inplace_cluster_rollout_state", map[string]string{"cluster": cluster, "state": "paused"})).To(Equal(1.0))
	g.Expect(s.value("capi_inplace_cluster_rollout_state", map[string]string{"cluster": cluster, "state": "active"})).To(Equal(0.0))

	// No call for longer than the staleness bound: the cluster leaves the gauges.
	now = now.Add(DefaultMetricsStaleAfter + time.Second)
	g.Expect(scrape(t, reg).find("capi_inplace_cluster_rollout_state", map[string]string{"cluster": cluster})).To(BeNil())
}
