package extension

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capi-inplace/capi-inplace/internal/metrics"
)

// Metrics are the hook server's Prometheus metrics.
type Metrics struct {
	calls     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	decisions *prometheus.CounterVec
	holds     *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (controller-runtime's
// metrics.Registry in the binary, a fresh registry in tests). Registering twice on
// the same registry reuses the collectors already there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_hook_calls_total",
			Help: "Runtime hook calls answered, by hook and response status.",
		}, []string{"hook", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capi_inplace_hook_duration_seconds",
			Help:    "Time spent answering a runtime hook call, by hook and response status (Success, Failure).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"hook", "status"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_planner_decisions_total",
			Help: "Field decisions of the planner, by hook, object kind and whether the change is covered in place.",
		}, []string{"hook", "object", "covered"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_fleet_holds_total",
			Help: "UpdateMachine calls that held a node update before cordon, by reason (Paused, Halted by the failure budget, WindowClosed, Soaking, Cancelled).",
		}, []string{"reason"}),
	}
	var err error
	if m.calls, err = metrics.Register(reg, m.calls); err != nil {
		return nil, err
	}
	if m.duration, err = metrics.Register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.decisions, err = metrics.Register(reg, m.decisions); err != nil {
		return nil, err
	}
	if m.holds, err = metrics.Register(reg, m.holds); err != nil {
		return nil, err
	}
	return m, nil
}

// Held counts one node update held by the fleet controls (coordinator.FleetMetrics).
func (m *Metrics) Held(reason string) {
	if m == nil {
		return
	}
	m.holds.WithLabelValues(reason).Inc()
}
