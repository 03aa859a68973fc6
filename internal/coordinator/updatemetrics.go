package coordinator

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capi-inplace/capi-inplace/internal/metrics"
)

// DefaultMetricsStaleAfter is how long a node or cluster stays in the live
// gauges after the last call that saw it. CAPI calls UpdateMachine for a node in
// flight at least every minute (the coordinator's longest retryAfterSeconds is 60),
// and every replica of the extension sees a share of the calls: a replica that
// stops seeing a node (another one finished it) drops it after this long.
const DefaultMetricsStaleAfter = 5 * time.Minute

// PrometheusMetrics are the extension's metrics of node updates, recorded from
// the coordinator's calls (it implements UpdateMetrics). Counters and histograms carry
// label values from fixed sets and the cluster; the live gauges (nodes in flight,
// cordoned, blocked drains, cluster state) carry the node, but only for nodes
// whose update is under way (the cardinality budget in docs/metrics.md).
type PrometheusMetrics struct {
	outcomes  *prometheus.CounterVec
	took      *prometheus.HistogramVec
	steps     *prometheus.HistogramVec
	cordoned  prometheus.Counter
	published prometheus.Counter

	live *liveUpdates
}

// MetricsOptions configure NewPrometheusMetrics.
type MetricsOptions struct {
	// StaleAfter: DefaultMetricsStaleAfter when zero.
	StaleAfter time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

var _ UpdateMetrics = (*PrometheusMetrics)(nil)

// durationBuckets span a quick patch update (seconds) to a slow drain or a
// reboot of bare metal (an hour).
var durationBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600}

// NewPrometheusMetrics creates the metrics and registers them on reg.
func NewPrometheusMetrics(reg prometheus.Registerer, opts MetricsOptions) (*PrometheusMetrics, error) {
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = DefaultMetricsStaleAfter
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &PrometheusMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_node_updates_total",
			Help: "Node updates that ended, by cluster and outcome (done, rolled_back, failed, not_picked_up, cancelled).",
		}, []string{"cluster", "outcome"}),
		took: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capi_inplace_node_update_duration_seconds",
			Help:    "Time from cordon to the end of a node update, by outcome.",
			Buckets: durationBuckets,
		}, []string{"outcome"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capi_inplace_update_step_duration_seconds",
			Help:    "Duration of the steps of a node update timed by the extension (drain: cordon to drained; apply: plan published to the agent's final report; verify: agent committed to outside gates passed).",
			Buckets: durationBuckets,
		}, []string{"step"}),
		cordoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "capi_inplace_nodes_cordoned_total",
			Help: "Nodes cordoned by the coordinator for an in-place update.",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "capi_inplace_plans_published_total",
			Help: "Node plans published to their node (one per node update).",
		}),
		live: &liveUpdates{staleAfter: opts.StaleAfter, now: opts.Now, nodes: map[nodeKey]liveNode{}, clusters: map[string]liveCluster{}},
	}
	var err error
	if m.outcomes, err = metrics.Register(reg, m.outcomes); err != nil {
		return nil, err
	}
	if m.took, err = metrics.Register(reg, m.took); err != nil {
		return nil, err
	}
	if m.steps, err = metrics.Register(reg, m.steps); err != nil {
		return nil, err
	}
	if m.cordoned, err = metrics.Register(reg, m.cordoned); err != nil {
		return nil, err
	}
	if m.published, err = metrics.Register(reg, m.published); err != nil {
		return nil, err
	}
	if m.live, err = metrics.Register(reg, m.live); err != nil {
		return nil, err
	}
	return m, nil
}

// RecordCall implements UpdateMetrics.
func (m *PrometheusMetrics) RecordCall(r CallRecord) {
	if m == nil {
		return
	}
	if r.Cordoned {
		m.cordoned.Inc()
	}
	if r.Published {
		m.published.Inc()
	}
	for step, d := range r.Steps {
		m.steps.WithLabelValues(step).Observe(d.Seconds())
	}
	if r.Outcome != "" {
		m.outcomes.WithLabelValues(r.Cluster, r.Outcome).Inc()
		m.took.WithLabelValues(r.Outcome).Observe(r.Took.Seconds())
	}
	m.live.record(r)
}

type nodeKey struct{ cluster, node string }

type liveNode struct {
	started      time.Time
	cordonedByUs bool
	degraded     bool
	pastDeadline string
	held         bool
	blockedBy    string
	blockedFor   time.Duration
	seen         time.Time
}

type liveCluster struct {
	state string
	seen  time.Time
}

// liveUpdates is the collector of the gauges: what the last calls saw of each
// node in flight and each cluster, dropped when the update ends or no call saw it
// for staleAfter.
type liveUpdates struct {
	staleAfter time.Duration
	now        func() time.Time

	mu       sync.Mutex
	nodes    map[nodeKey]liveNode
	clusters map[string]liveCluster
}

var (
	descStarted = prometheus.NewDesc("capi_inplace_node_update_started_timestamp_seconds",
		"When the update of a node in flight started (cordon), by cluster and node; only nodes whose update is under way.", []string{"cluster", "node"}, nil)
	descCordoned = prometheus.NewDesc("capi_inplace_node_cordoned_by_us_since_timestamp_seconds",
		"When the coordinator cordoned a node it still holds cordoned, by cluster and node.", []string{"cluster", "node"}, nil)
	descDegraded = prometheus.NewDesc("capi_inplace_node_degraded",
		"1 for a node whose rollback failed or whose agent journal is corrupt: it stays cordoned and needs a human.", []string{"cluster", "node"}, nil)
	descPastDeadline = prometheus.NewDesc("capi_inplace_node_deadline_exceeded",
		"1 for a node whose update passed the deadline of a phase (staging, applying, rebooting, verifying), by cluster, node and phase.", []string{"cluster", "node", "phase"}, nil)
	descRemediationHeld = prometheus.NewDesc("capi_inplace_node_remediation_held",
		"1 for a node left cordoned and broken (Degraded or past a deadline) whose Machine keeps the remediation hold by policy (deadlines.keepRemediationHold): no MachineHealthCheck replaces it.", []string{"cluster", "node"}, nil)
	descBlocked = prometheus.NewDesc("capi_inplace_node_drain_blocked_seconds",
		"How long the drain of a node has run while a PodDisruptionBudget refuses an eviction, by cluster, node and PDB (namespace/name).", []string{"cluster", "node", "pdb"}, nil)
	descInProgress = prometheus.NewDesc("capi_inplace_cluster_nodes_in_progress",
		"Nodes of a cluster whose update is under way.", []string{"cluster"}, nil)
	descClusterState = prometheus.NewDesc("capi_inplace_cluster_rollout_state",
		"1 for the rollout state of a cluster (active, paused, halted, window_closed, soaking).", []string{"cluster", "state"}, nil)
)

func (l *liveUpdates) record(r CallRecord) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.ClusterState != "" {
		l.clusters[r.Cluster] = liveCluster{state: r.ClusterState, seen: now}
	}
	k := nodeKey{r.Cluster, r.Node}
	if !r.InFlight && !r.CordonedByUs && !r.Degraded && r.PastDeadline == "" {
		delete(l.nodes, k)
		return
	}
	l.nodes[k] = liveNode{started: r.Started, cordonedByUs: r.CordonedByUs, degraded: r.Degraded,
		pastDeadline: r.PastDeadline, held: r.RemediationHeld,
		blockedBy: r.DrainBlockedBy, blockedFor: r.DrainBlockedFor, seen: now}
}

// Describe implements prometheus.Collector.
func (l *liveUpdates) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStarted, descCordoned, descDegraded, descPastDeadline, descRemediationHeld, descBlocked, descInProgress, descClusterState} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (l *liveUpdates) Collect(ch chan<- prometheus.Metric) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	inProgress := map[string]int{}
	for k, n := range l.nodes {
		if now.Sub(n.seen) > l.staleAfter {
			delete(l.nodes, k)
			continue
		}
		if !n.started.IsZero() {
			inProgress[k.cluster]++
			ch <- prometheus.MustNewConstMetric(descStarted, prometheus.GaugeValue, unixSeconds(n.started), k.cluster, k.node)
			if n.cordonedByUs {
				ch <- prometheus.MustNewConstMetric(descCordoned, prometheus.GaugeValue, unixSeconds(n.started), k.cluster, k.node)
			}
		}
		if n.degraded {
			ch <- prometheus.MustNewConstMetric(descDegraded, prometheus.GaugeValue, 1, k.cluster, k.node)
		}
		if n.pastDeadline != "" {
			ch <- prometheus.MustNewConstMetric(descPastDeadline, prometheus.GaugeValue, 1, k.cluster, k.node, n.pastDeadline)
		}
		if n.held {
			ch <- prometheus.MustNewConstMetric(descRemediationHeld, prometheus.GaugeValue, 1, k.cluster, k.node)
		}
		if n.blockedBy != "" {
			ch <- prometheus.MustNewConstMetric(descBlocked, prometheus.GaugeValue, n.blockedFor.Seconds(), k.cluster, k.node, n.blockedBy)
		}
	}
	names := make([]string, 0, len(l.clusters))
	for name, c := range l.clusters {
		if now.Sub(c.seen) > l.staleAfter {
			delete(l.clusters, name)
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ch <- prometheus.MustNewConstMetric(descInProgress, prometheus.GaugeValue, float64(inProgress[name]), name)
		for _, state := range clusterStates {
			v := 0.0
			if l.clusters[name].state == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descClusterState, prometheus.GaugeValue, v, name, state)
		}
	}
}

var clusterStates = []string{ClusterStateActive, ClusterStatePaused, ClusterStateHalted,
	ClusterStateWindowClosed, ClusterStateSoaking}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
