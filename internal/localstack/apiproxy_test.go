package localstack

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestProxyWatchFiltersByName: the proxy's own watch (a name-filtered watch's path
// when the shared watch cannot start, watchhub.go) gets exactly the events of that
// object (and bookmarks), each a complete JSON event on its own line; the upstream
// watch has no selector.
func TestProxyWatchFiltersByName(t *testing.T) {
	var upstreamQuery url.Values
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamQuery = r.URL.Query()
		for i, n := range []string{"a", "b", "", "a", "ab"} {
			typ := "MODIFIED"
			if n == "" {
				typ = "BOOKMARK"
			}
			_, _ = fmt.Fprintf(w, `{"type":%q,"object":{"kind":"Node","metadata":{"name":%q,"resourceVersion":"%d","annotations":{"x":"a\"b"}}}}`+"\n", typ, n, i+1)
		}
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := &apiProxy{upstream: u, client: upstream.Client()}

	rec := httptest.NewRecorder()
	p.watch(rec, httptest.NewRequest(http.MethodGet, "/api/v1/nodes?watch=true", nil), "a")
	if upstreamQuery.Get("fieldSelector") != "" || upstreamQuery.Get("watch") != "true" {
		t.Fatalf("upstream query %v: want the watch without the selector", upstreamQuery)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(rec.Body.String()), "\n") {
		ev := decodeTestEvent(t, []byte(line))
		got = append(got, ev.String())
	}
	want := []string{"MODIFIED/a/1", "BOOKMARK//3", "MODIFIED/a/4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
}
