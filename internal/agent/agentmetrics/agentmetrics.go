package agentmetrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/metrics"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Phase labels: the plan phases an agent spends time in.
const (
	PhaseStage    = "stage"
	PhaseApply    = "apply"
	PhaseReboot   = "reboot"
	PhaseVerify   = "verify"
	PhaseRollback = "rollback"
)

// Outcome labels of capi_inplace_agent_plans_total.
const (
	OutcomeCommitted  = "committed"
	OutcomeRolledBack = "rolled_back"
	OutcomeFailed     = "failed"
)

// Metrics are one agent's metrics on their own registry.
type Metrics struct {
	reg *prometheus.Registry
	now func() time.Time

	phases        *prometheus.HistogramVec
	plans         *prometheus.CounterVec
	failures      *prometheus.CounterVec
	journalWrites *prometheus.CounterVec
	lastCommitted prometheus.Gauge
	lastReport    prometheus.Gauge

	mu    sync.Mutex
	plan  string    // the plan of the phase being timed
	phase string    // its phase label ("" when not timing)
	since time.Time // when this process saw that phase begin
}

// New creates the metrics on a registry of their own, with the Go and process
// collectors; now nil means time.Now.
func New(now func() time.Time) (*Metrics, error) {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		now: now,
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capi_inplace_agent_phase_duration_seconds",
			Help:    "Time a plan spent in a phase on this node (stage, apply, reboot, verify, rollback), one observation per run of the phase (a plan that reboots applies before and after the reboot), as seen by this agent process.",
			Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"phase"}),
		plans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_agent_plans_total",
			Help: "Plans this agent finished, by outcome (committed, rolled_back, failed).",
		}, []string{"outcome"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_agent_phase_failures_total",
			Help: "Plans that failed or rolled back, by the phase they failed in.",
		}, []string{"phase"}),
		journalWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_agent_journal_writes_total",
			Help: "Durable journal writes on the host disk, by result (ok, error).",
		}, []string{"result"}),
		lastCommitted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capi_inplace_agent_last_committed_plan_timestamp_seconds",
			Help: "When this agent process last saw a plan committed (0: none since it started).",
		}),
		lastReport: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capi_inplace_agent_last_report_timestamp_seconds",
			Help: "When the agent last reported a plan status.",
		}),
	}
	for _, c := range []prometheus.Collector{m.phases, m.plans, m.failures, m.journalWrites, m.lastCommitted, m.lastReport,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if _, err := metrics.Register(m.reg, c); err != nil {
			return nil, err
		}
	}
	// Known label values start at zero, so that rate() and absent() work before
	// the first event.
	for _, o := range []string{OutcomeCommitted, OutcomeRolledBack, OutcomeFailed} {
		m.plans.WithLabelValues(o)
	}
	for _, r := range []string{"ok", "error"} {
		m.journalWrites.WithLabelValues(r)
	}
	return m, nil
}

// Registry is the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// phaseLabel maps a plan phase to the label it is timed under; "" for the
// phases that are not spent time in (Pending, and the terminal ones).
func phaseLabel(p protocol.Phase) string {
	switch p {
	case protocol.PhaseStaging:
		return PhaseStage
	case protocol.PhaseApplying:
		return PhaseApply
	case protocol.PhaseRebooting:
		return PhaseReboot
	case protocol.PhaseVerifying:
		return PhaseVerify
	case protocol.PhaseRollingBack:
		return PhaseRollback
	}
	return ""
}

// Observe records one status the agent reports.
func (m *Metrics) Observe(s protocol.NodeStatus) {
	now := m.now()
	m.lastReport.Set(float64(now.UnixNano()) / 1e9)
	m.mu.Lock()
	defer m.mu.Unlock()
	label := phaseLabel(s.Phase)
	if s.PlanHash == m.plan && label == m.phase && label != "" {
		return // the same phase again: progress within it
	}
	timed := m.phase != "" && s.PlanHash == m.plan
	if timed {
		m.phases.WithLabelValues(m.phase).Observe(now.Sub(m.since).Seconds())
	}
	if timed && s.Phase.Terminal() {
		// Counted only when this process saw the plan at work: a finished plan
		// re-reported at start is not a new outcome.
		switch s.Phase {
		case protocol.PhaseCommitted:
			m.plans.WithLabelValues(OutcomeCommitted).Inc()
			m.lastCommitted.Set(float64(now.UnixNano()) / 1e9)
		case protocol.PhaseRolledBack:
			m.plans.WithLabelValues(OutcomeRolledBack).Inc()
		case protocol.PhaseFailed:
			m.plans.WithLabelValues(OutcomeFailed).Inc()
		}
	}
	if timed && (s.Phase == protocol.PhaseRollingBack || (s.Phase.Terminal() && s.Phase != protocol.PhaseCommitted)) && m.phase != PhaseRollback {
		m.failures.WithLabelValues(m.phase).Inc()
	}
	m.plan, m.phase, m.since = s.PlanHash, label, now
}

// Reporter is the executor's status sink, observed on its way.
type Reporter interface {
	Report(s protocol.NodeStatus)
}

// ObservedReporter reports through next and records every status.
func (m *Metrics) ObservedReporter(next Reporter) Reporter {
	return observedReporter{m: m, next: next}
}

type observedReporter struct {
	m    *Metrics
	next Reporter
}

func (r observedReporter) Report(s protocol.NodeStatus) {
	r.m.Observe(s)
	r.next.Report(s)
}

// CountedJournal saves through next and counts the writes.
func (m *Metrics) CountedJournal(next journal.Journal) journal.Journal {
	return countedJournal{m: m, next: next}
}

type countedJournal struct {
	m    *Metrics
	next journal.Journal
}

func (j countedJournal) Load() (journal.Entry, error) { return j.next.Load() }

func (j countedJournal) Save(e journal.Entry) error {
	err := j.next.Save(e)
	result := "ok"
	if err != nil {
		result = "error"
	}
	j.m.journalWrites.WithLabelValues(result).Inc()
	return err
}
