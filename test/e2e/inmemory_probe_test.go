//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// probe is one request against the in-memory workload API server and the status we
// documented for it in README.md.
type probe struct {
	name        string
	method      string
	path        string
	contentType string
	body        string
	want        int // HTTP status documented in README.md
}

// TestInMemoryAPIServerCapabilities records, against a live in-memory workload
// cluster, which API features our coordinator and agent can rely on there (README.md
// has the table). It fails when upstream's behaviour changes, so the doc stays true.
func TestInMemoryAPIServerCapabilities(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "probe", "none")
	const cluster = "probe"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion, ControlPlaneReplicas: 1,
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 1)
	node := s.machines(cluster)[0].Status.NodeRef.Name
	kc, err := s.stack.WorkloadKubeconfig(s.ctx, s.ns, cluster)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "capi-inplace-system"
	secret := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"plan-` + node + `","namespace":"` + ns + `","labels":{"inplace.capi-inplace.dev/node":"` + node + `"}},"data":{"plan.json":"e30="}}`
	probes := []probe{
		{"create Namespace", "POST", "/api/v1/namespaces", "application/json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + ns + `"}}`, 200},
		{"create Secret", "POST", "/api/v1/namespaces/" + ns + "/secrets", "application/json", secret, 200},
		{"get Secret", "GET", "/api/v1/namespaces/" + ns + "/secrets/plan-" + node, "", "", 200},
		{"list Secrets by label selector", "GET", "/api/v1/namespaces/" + ns + "/secrets?labelSelector=inplace.capi-inplace.dev%2Fnode%3D" + node, "", "", 200},
		{"list Secrets by field selector metadata.name", "GET", "/api/v1/namespaces/" + ns + "/secrets?fieldSelector=metadata.name%3Dplan-" + node, "", "", 500},
		{"merge-patch Secret", "PATCH", "/api/v1/namespaces/" + ns + "/secrets/plan-" + node, "application/merge-patch+json", `{"metadata":{"annotations":{"a":"b"}}}`, 200},
		{"merge-patch Node annotations", "PATCH", "/api/v1/nodes/" + node, "application/merge-patch+json", `{"metadata":{"annotations":{"inplace.capi-inplace.dev/state":"Probe"}}}`, 200},
		{"strategic-merge-patch Node (treated as merge)", "PATCH", "/api/v1/nodes/" + node, "application/strategic-merge-patch+json", `{"metadata":{"labels":{"probe":"x"}}}`, 200},
		{"json-patch Node", "PATCH", "/api/v1/nodes/" + node, "application/json-patch+json", `[{"op":"add","path":"/metadata/labels/probe2","value":"x"}]`, 415},
		{"server-side apply Node", "PATCH", "/api/v1/nodes/" + node + "?fieldManager=probe", "application/apply-patch+yaml", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"` + node + `","labels":{"probe3":"x"}}}`, 415},
		{"merge-patch Node status subresource", "PATCH", "/api/v1/nodes/" + node + "/status", "application/merge-patch+json", `{"status":{"nodeInfo":{"kubeletVersion":"v9.9.9"}}}`, 404},
		{"merge-patch Node status via main resource", "PATCH", "/api/v1/nodes/" + node, "application/merge-patch+json", `{"status":{"nodeInfo":{"kubeletVersion":"` + fromVersion + `"}}}`, 200},
		{"list Pods by field selector spec.nodeName", "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3D" + node, "", "", 200},
		{"evict Pod (policy/v1 Eviction)", "POST", "/api/v1/namespaces/kube-system/pods/kube-apiserver-" + node + "/eviction", "application/json", `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"kube-apiserver-` + node + `","namespace":"kube-system"}}`, 404},
		{"create DaemonSet", "POST", "/apis/apps/v1/namespaces/" + ns + "/daemonsets", "application/json", `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"agent"},"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"a","image":"x"}]}}}}`, 200},
		{"create ClusterRole", "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", "application/json", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"probe"}}`, 200},
		{"discover admissionregistration.k8s.io/v1 (ValidatingAdmissionPolicy)", "GET", "/apis/admissionregistration.k8s.io/v1", "", "", 500},
		{"create core/v1 Event", "POST", "/api/v1/namespaces/default/events", "application/json", `{"apiVersion":"v1","kind":"Event","metadata":{"name":"probe"}}`, 500},
		{"discover coordination.k8s.io/v1 (Leases)", "GET", "/apis/coordination.k8s.io/v1", "", "", 500},
	}
	var failures []string
	for _, p := range probes {
		code, body := doProbe(s.ctx, hc, cfg.Host, p)
		mark := "ok"
		if code != p.want {
			mark = "CHANGED"
			failures = append(failures, fmt.Sprintf("%s: got %d, documented %d (%s)", p.name, code, p.want, body))
		}
		s.logf("EVIDENCE in-memory API: %-62s %s %-3d %s %s", p.name, p.method, code, mark, oneLine(body, 120))
	}

	// A watch on Secrets with a label selector sees an update; with a field selector it
	// fails (the list behind the watch rejects field selectors on anything but Pods).
	watchCode, events := watchSecrets(s.ctx, hc, cfg.Host, "/api/v1/namespaces/"+ns+"/secrets?watch=true&labelSelector=inplace.capi-inplace.dev%2Fnode%3D"+node, func() {
		doProbe(s.ctx, hc, cfg.Host, probe{method: "PATCH", path: "/api/v1/namespaces/" + ns + "/secrets/plan-" + node, contentType: "application/merge-patch+json", body: `{"metadata":{"annotations":{"w":"1"}}}`})
	})
	s.logf("EVIDENCE in-memory API: watch Secrets by label selector: HTTP %d, events %v", watchCode, events)
	if watchCode != 200 || !containsAll(events, "ADDED", "MODIFIED") {
		failures = append(failures, fmt.Sprintf("label-selector watch: HTTP %d events %v", watchCode, events))
	}
	// The list behind the watch fails, but a deferred cleanup in the handler overwrites
	// the error: the client gets HTTP 200 and a stream that ends at once, empty.
	fwCode, fwEvents := watchSecrets(s.ctx, hc, cfg.Host, "/api/v1/namespaces/"+ns+"/secrets?watch=true&fieldSelector=metadata.name%3Dplan-"+node, func() {})
	s.logf("EVIDENCE in-memory API: watch Secrets by field selector metadata.name: HTTP %d, events %v (stream ends at once)", fwCode, fwEvents)
	if len(fwEvents) > 0 {
		failures = append(failures, "field-selector watch now delivers events: update README.md")
	}
	if len(failures) > 0 {
		t.Fatalf("in-memory API server differs from README.md:\n%s", strings.Join(failures, "\n"))
	}
}

func doProbe(ctx context.Context, hc *http.Client, host string, p probe) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, p.method, host+p.path, strings.NewReader(p.body))
	if err != nil {
		return 0, err.Error()
	}
	if p.contentType != "" {
		req.Header.Set("Content-Type", p.contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	code := resp.StatusCode
	// The in-memory server writes 200 for successful creates.
	return code, string(b)
}

// watchSecrets opens a watch, runs trigger, and returns the HTTP status and the event
// types seen within a few seconds. The in-memory server pretty-prints each event, so
// the stream is decoded as a sequence of JSON values, not lines.
func watchSecrets(ctx context.Context, hc *http.Client, host, path string, trigger func()) (int, []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", host+path, nil)
	if err != nil {
		return 0, nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		trigger()
	}()
	var types []string
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type string `json:"type"`
		}
		if err := dec.Decode(&ev); err != nil {
			return resp.StatusCode, types
		}
		types = append(types, ev.Type)
		if containsAll(types, "ADDED", "MODIFIED") {
			return resp.StatusCode, types
		}
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
