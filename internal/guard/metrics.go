package guard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capi-inplace/capi-inplace/internal/metrics"
	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// Results of a guarded write, the label of capi_inplace_guard_writes_total.
const (
	ResultAllowed    = "allowed"
	ResultRefused    = "refused"
	ResultOverridden = "overridden"
	ResultDisabled   = "disabled"
	// ResultError: the guard could not read or plan the Cluster and refused (fail closed).
	ResultError = "error"
)

// Metrics are the guard's Prometheus metrics. Label values come from fixed sets
// (preview.CauseKind, the Result constants, the guarded kinds), never from names.
type Metrics struct {
	refusals *prometheus.CounterVec
	writes   *prometheus.CounterVec
	duration prometheus.Histogram
}

// NewMetrics creates the metrics and registers them on reg (controller-runtime's
// metrics.Registry in the binary, a fresh registry in tests); registering twice on
// the same registry reuses the collectors already there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_guard_refusals_total",
			Help: "Writes refused by the in-place-only guard, by reason kind (one count per kind per refused write).",
		}, []string{"reason"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_guard_writes_total",
			Help: "Writes the in-place-only guard decided, by object kind and result.",
		}, []string{"kind", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capi_inplace_guard_duration_seconds",
			Help:    "Time the in-place-only guard spent on one admission request.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
	}
	var err error
	if m.refusals, err = metrics.Register(reg, m.refusals); err != nil {
		return nil, err
	}
	if m.writes, err = metrics.Register(reg, m.writes); err != nil {
		return nil, err
	}
	if m.duration, err = metrics.Register(reg, m.duration); err != nil {
		return nil, err
	}
	return m, nil
}

// errorReason labels a refusal the guard made because it could not decide.
const errorReason = "guard-error"

func (m *Metrics) record(kind, result string, reasons []preview.CauseKind, seconds float64) {
	if m == nil {
		return
	}
	m.writes.WithLabelValues(kind, result).Inc()
	m.duration.Observe(seconds)
	switch result {
	case ResultRefused:
		for _, r := range reasons {
			m.refusals.WithLabelValues(string(r)).Inc()
		}
	case ResultError:
		m.refusals.WithLabelValues(errorReason).Inc()
	}
}
