package metrics_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capi-inplace/capi-inplace/internal/metrics"
)

func TestRegister(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "capi_inplace_test_total", Help: "A test counter."}

	first, err := metrics.Register(reg, prometheus.NewCounter(opts))
	g.Expect(err).NotTo(HaveOccurred())
	// The same description again: the collector already registered comes back, so
	// both handles count into one series.
	second, err := metrics.Register(reg, prometheus.NewCounter(opts))
	g.Expect(err).NotTo(HaveOccurred())
	first.Inc()
	second.Inc()
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(families).To(HaveLen(1))
	g.Expect(families[0].GetMetric()[0].GetCounter().GetValue()).To(Equal(2.0))

	// The same name with other labels is a conflict, not a reuse.
	_, err = metrics.Register(reg, prometheus.NewCounterVec(opts, []string{"x"}))
	g.Expect(err).To(MatchError(ContainSubstring("register metrics")))
}
