// Package prometheusrules holds no code: config/prometheus is the PrometheusRule
// of capi-inplace's alerts (prometheusrule.yaml) with promtool unit tests of every
// alert (rules_test.yaml). Its test checks the rules and runs those unit tests with
// promtool, and checks that the rules and the Grafana dashboard
// (config/grafana/capi-inplace-dashboard.json) parse and name only metrics that
// capi-inplace registers (docs/metrics.md).
package prometheusrules
