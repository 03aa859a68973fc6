package prometheusrules_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/agent/agentmetrics"
	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/fleetrollout"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// promtool finds promtool (Debian's package, hack/install-deps.sh); without it
// the test skips, except in CI, where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool is not installed: run hack/install-deps.sh (Debian package prometheus)")
	}
	return path
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
}

type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert,omitempty"`
			Record string `json:"record,omitempty"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// ruleFile reads the PrometheusRule and returns its spec (the rule groups, which
// is what promtool reads) as YAML.
func ruleFile(t *testing.T) ([]byte, ruleGroups) {
	t.Helper()
	raw, err := os.ReadFile("prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Kind string          `json:"kind"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if obj.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml is a %q", obj.Kind)
	}
	var groups ruleGroups
	if err := json.Unmarshal(obj.Spec, &groups); err != nil {
		t.Fatalf("prometheusrule.yaml spec: %v", err)
	}
	out, err := yaml.JSONToYAML(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return out, groups
}

// TestRulesPassPromtool checks the rules with promtool and runs the unit tests of
// every alert in rules_test.yaml; every alert must have a test.
func TestRulesPassPromtool(t *testing.T) {
	g := NewWithT(t)
	pt := promtool(t)
	rules, groups := ruleFile(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644)).To(Succeed())
	tests, err := os.ReadFile("rules_test.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644)).To(Succeed())

	run(t, dir, pt, "check", "rules", "rules.yaml")
	run(t, dir, pt, "test", "rules", "rules_test.yaml")

	var unit struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	g.Expect(yaml.Unmarshal(tests, &unit)).To(Succeed())
	fires := map[string]bool{}
	for _, tc := range unit.Tests {
		for _, a := range tc.AlertRuleTest {
			fires[a.Alertname] = fires[a.Alertname] || len(a.ExpAlerts) > 0
		}
	}
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			if r.Alert != "" {
				g.Expect(fires).To(HaveKeyWithValue(r.Alert, true), "alert %s has no unit test in which it fires", r.Alert)
			}
		}
	}
}

// registered returns the names of every metric capi-inplace registers, from its
// real metric sets (the extension's hooks and node updates, the guard, the
// FleetRollout controller, the agent), with the series names of histograms.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	if _, err := extension.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := coordinator.NewPrometheusMetrics(reg, coordinator.MetricsOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := fleetrollout.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	am, err := agentmetrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true} // the scrape's own series
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range []prometheus.Collector{reg, am.Registry()} {
		ch := make(chan *prometheus.Desc, 256)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
		}
	}
	return names
}

// fleetRolloutMetrics returns the names of the FleetRollout controller's metrics.
func fleetRolloutMetrics(t *testing.T) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	if _, err := fleetrollout.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 64)
	go func() { reg.Describe(ch); close(ch) }()
	var out []string
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatal("the FleetRollout controller registers no metric")
	}
	return out
}

// metricName matches a metric name in PromQL, not a function, keyword or label:
// capi-inplace's prefix, or the scrape's up series.
var metricName = regexp.MustCompile(`\b(capi_inplace_[a-z0-9_]+|up)\b\s*(\{|\[|\)|\s|$|==|>|<)`)

// metricsIn returns the metric names an expression reads.
func metricsIn(expr string) []string {
	var out []string
	for _, m := range metricName.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestRulesNameRegisteredMetrics(t *testing.T) {
	names := registered(t)
	_, groups := ruleFile(t)
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			used := metricsIn(r.Expr)
			if len(used) == 0 {
				t.Errorf("alert %s reads no metric of capi-inplace: %s", r.Alert, r.Expr)
			}
			for _, n := range used {
				if !names[n] {
					t.Errorf("alert %s reads %s, which capi-inplace does not register", r.Alert, n)
				}
			}
		}
	}
}

// grafanaVariables are the dashboard's template variables, replaced by values
// PromQL parses before its expressions are checked.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$cluster", ".*", "$rollout", ".*")

// TestDashboard reads the Grafana dashboard: a dashboard model with unique panel
// ids and grid positions that do not overlap, cluster and rollout variables, and
// panels whose every expression parses as PromQL (promtool checks them as
// recording rules) and reads only metrics capi-inplace registers, among them
// every FleetRollout metric.
func TestDashboard(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join("..", "grafana", "capi-inplace-dashboard.json"))
	g.Expect(err).NotTo(HaveOccurred())
	var d struct {
		Title         string `json:"title"`
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			GridPos *struct {
				H, W, X, Y int
			} `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	// Grafana defines many more fields; the typed subset is what must hold.
	g.Expect(json.Unmarshal(raw, &d)).To(Succeed())
	g.Expect(d.Title).NotTo(BeEmpty())
	g.Expect(d.UID).To(Equal("capi-inplace"))
	g.Expect(d.SchemaVersion).To(BeNumerically(">=", 36))
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	g.Expect(vars).To(HaveKeyWithValue("datasource", "datasource"))
	g.Expect(vars).To(HaveKeyWithValue("cluster", "query"))
	g.Expect(vars).To(HaveKeyWithValue("rollout", "query"))

	names := registered(t)
	ids := map[int]bool{}
	// cells maps each grid cell (x, y) to the panel that covers it.
	type cell struct{ x, y int }
	cells := map[cell]string{}
	shown := map[string]bool{}
	var exprs []string
	for _, p := range d.Panels {
		g.Expect(ids).NotTo(HaveKey(p.ID), "panel id %d twice", p.ID)
		ids[p.ID] = true
		g.Expect(p.GridPos).NotTo(BeNil(), "panel %q has no gridPos", p.Title)
		g.Expect(p.GridPos.X+p.GridPos.W).To(BeNumerically("<=", 24), "panel %q is wider than the grid", p.Title)
		g.Expect(p.GridPos.W).To(BeNumerically(">", 0), "panel %q has no width", p.Title)
		g.Expect(p.GridPos.H).To(BeNumerically(">", 0), "panel %q has no height", p.Title)
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				other, taken := cells[cell{x, y}]
				g.Expect(taken).To(BeFalse(), "panel %q overlaps panel %q at x=%d y=%d", p.Title, other, x, y)
				cells[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		g.Expect(p.Targets).NotTo(BeEmpty(), "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			g.Expect(tg.RefID).NotTo(BeEmpty())
			used := metricsIn(tg.Expr)
			g.Expect(used).NotTo(BeEmpty(), "panel %q: %s reads no metric of capi-inplace", p.Title, tg.Expr)
			for _, n := range used {
				g.Expect(names).To(HaveKey(n), "panel %q reads %s, which capi-inplace does not register", p.Title, n)
				shown[n] = true
			}
			exprs = append(exprs, grafanaVariables.Replace(tg.Expr))
		}
	}
	g.Expect(len(exprs)).To(BeNumerically(">=", 10))
	// A FleetRollout metric with no panel is a gap an operator of hundreds of
	// Clusters finds only when it matters.
	for _, n := range fleetRolloutMetrics(t) {
		g.Expect(shown).To(HaveKey(n), "no panel shows %s", n)
	}

	// Every expression through Prometheus' own parser: promtool checks a rule file
	// with one recording rule per expression.
	pt := promtool(t)
	var b strings.Builder
	b.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(e)
		fmt.Fprintf(&b, "  - record: dashboard:panel_%d\n    expr: %s\n", i, q)
	}
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "dashboard-rules.yaml"), []byte(b.String()), 0o644)).To(Succeed())
	run(t, dir, pt, "check", "rules", "dashboard-rules.yaml")
}

// TestMetricsInFindsNames keeps the name matcher honest.
func TestMetricsInFindsNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`time() - max by (cluster) (capi_inplace_x_seconds{cluster=~".*"})`, []string{"capi_inplace_x_seconds"}},
		{`up{job="a"} == 0`, []string{"up"}},
		{`histogram_quantile(0.5, sum by (le) (rate(capi_inplace_y_bucket[5m])))`, []string{"capi_inplace_y_bucket"}},
		{`sum(capi_inplace_a) / sum(capi_inplace_b)`, []string{"capi_inplace_a", "capi_inplace_b"}},
		{`absent(up{job="x"} == 1)`, []string{"up"}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			g := NewWithT(t)
			got := metricsIn(tt.expr)
			sort.Strings(got)
			g.Expect(got).To(Equal(tt.want))
		})
	}
}
