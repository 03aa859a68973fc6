package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// APIRequests counts a kube-apiserver's requests by verb and resource
// (apiserver_request_total summed over codes, scopes and components), e.g.
// "PATCH machines/status": 12. The management API server burns CPU in proportion
// to a rollout round's length in null and ours rounds alike; what a round's
// requests add, and by which kind, says what ours costs it. Conflicts (409) are
// counted once more on their own, as "409 PATCH machines/status": a write that
// lost an optimistic-lock race costs its writer a re-read and a retry, Cluster
// API's patch helper a backoff of 100 ms or more.
type APIRequests map[string]float64

// conflictKey prefixes the second count of a conflict: "409 PATCH machines/status".
const conflictKey = "409 "

// SnapshotAPIRequests reads the API server's request counters from /metrics with
// the credentials of cfg.
func SnapshotAPIRequests(ctx context.Context, cfg *rest.Config) (APIRequests, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the API server's metrics: %s", resp.Status)
	}
	return parseAPIRequests(resp.Body)
}

func parseAPIRequests(r io.Reader) (APIRequests, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := APIRequests{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		var verb, resource, sub, code string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				verb = l.GetValue()
			case "resource":
				resource = l.GetValue()
			case "subresource":
				sub = l.GetValue()
			case "code":
				code = l.GetValue()
			}
		}
		if sub != "" {
			resource += "/" + sub
		}
		out[verb+" "+resource] += m.GetCounter().GetValue()
		if code == "409" {
			out[conflictKey+verb+" "+resource] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// Since returns the requests counted after before, largest first, as
// "PATCH machines/status 12" items; n bounds how many kinds are listed (the
// rest are summed as "other").
func (a APIRequests) Since(before APIRequests, n int) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	total := 0.0
	for k, v := range a {
		if d := v - before[k]; d > 0 {
			all = append(all, kv{k, d})
			if !strings.HasPrefix(k, conflictKey) { // counted in its verb and resource already
				total += d
			}
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var b strings.Builder
	fmt.Fprintf(&b, "total %.0f:", total)
	other := 0.0
	for i, e := range all {
		if i >= n {
			other += e.v
			continue
		}
		fmt.Fprintf(&b, " %s %.0f,", e.k, e.v)
	}
	if other > 0 {
		fmt.Fprintf(&b, " other %.0f", other)
	}
	return strings.TrimSuffix(b.String(), ",")
}
