package bench

import (
	"strings"
	"testing"
)

// TestAPIRequestsSince: the request counters are summed by verb and resource
// (codes, scopes and components folded; conflicts counted once more on their
// own), and a round's delta lists the largest kinds first with the rest as "other".
func TestAPIRequestsSince(t *testing.T) {
	const before = `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",resource="machines",scope="resource",subresource="status",verb="PATCH"} 10
apiserver_request_total{code="200",component="apiserver",resource="machines",scope="resource",subresource="",verb="GET"} 5
`
	const after = `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",resource="machines",scope="resource",subresource="status",verb="PATCH"} 14
apiserver_request_total{code="409",component="apiserver",resource="machines",scope="resource",subresource="status",verb="PATCH"} 2
apiserver_request_total{code="200",component="apiserver",resource="machines",scope="resource",subresource="",verb="GET"} 6
apiserver_request_total{code="201",component="apiserver",resource="events",scope="namespace",subresource="",verb="POST"} 3
`
	b, err := parseAPIRequests(strings.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseAPIRequests(strings.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Since(b, 2), "total 10: PATCH machines/status 6, POST events 3, other 3"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := a.Since(b, 4), "total 10: PATCH machines/status 6, POST events 3, 409 PATCH machines/status 2, GET machines 1"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
