package localstack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeWatchServer plays the in-memory API server's list and watch for one
// resource: integer resourceVersions, a watch sends every object's event whatever
// its name or namespace (it cannot filter), and it counts the requests.
type fakeWatchServer struct {
	t  *testing.T
	mu sync.Mutex
	rv uint64
	// objects by namespace/name: the latest JSON.
	objects  map[string][]byte
	watchers map[chan []byte]struct{}
	lists    int
	watches  int
	// refuse, when set, is the status every request gets.
	refuse int
}

func newFakeWatchServer(t *testing.T) (*fakeWatchServer, *apiProxy) {
	f := &fakeWatchServer{t: t, objects: map[string][]byte{}, watchers: map[chan []byte]struct{}{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	p := &apiProxy{upstream: u, client: srv.Client()}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	t.Cleanup(p.closeHubs)
	p.addr = front.Listener.Addr().String()
	return f, p
}

func (f *fakeWatchServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.refuse != 0 {
		f.mu.Unlock()
		http.Error(w, "refused", f.refuse)
		return
	}
	if r.URL.Query().Get("fieldSelector") != "" {
		f.mu.Unlock()
		f.t.Errorf("upstream got a field selector: %s", r.URL)
		http.Error(w, "field selector", http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Get("watch") != "true" {
		f.lists++
		items := make([]json.RawMessage, 0, len(f.objects))
		for _, o := range f.objects {
			items = append(items, o)
		}
		b, _ := json.Marshal(map[string]any{"kind": "List", "metadata": map[string]string{"resourceVersion": strconv.FormatUint(f.rv, 10)}, "items": items})
		f.mu.Unlock()
		_, _ = w.Write(b)
		return
	}
	f.watches++
	ch := make(chan []byte, 100)
	f.watchers[ch] = struct{}{}
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			delete(f.watchers, ch)
			f.mu.Unlock()
			return
		case line, ok := <-ch:
			if !ok {
				return
			}
			_, _ = w.Write(line)
			w.(http.Flusher).Flush()
		}
	}
}

// set writes an object (a new resourceVersion) and sends its event to every watch.
func (f *fakeWatchServer) set(typ, namespace, name, payload string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	obj := fmt.Sprintf(`{"kind":"Node","metadata":{"name":%q,"namespace":%q,"resourceVersion":"%d","annotations":{"x":"a\"b"}},"payload":%q}`, name, namespace, f.rv, payload)
	if typ == "DELETED" {
		delete(f.objects, namespace+"/"+name)
	} else {
		f.objects[namespace+"/"+name] = []byte(obj)
	}
	line := []byte(fmt.Sprintf(`{"type":%q,"object":%s}`+"\n", typ, obj))
	for ch := range f.watchers {
		ch <- line
	}
	return f.rv
}

// endWatches ends every upstream watch, as the in-memory server's timeout does.
func (f *fakeWatchServer) endWatches() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.watchers {
		close(ch)
		delete(f.watchers, ch)
	}
}

func (f *fakeWatchServer) counts() (lists, watches int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists, f.watches
}

// clientWatch is one watch through the proxy, read line by line.
type clientWatch struct {
	t      *testing.T
	events chan string // "TYPE/name/rv/payload"
	done   chan struct{}
	status int
}

func startWatch(t *testing.T, p *apiProxy, path, name string, rv uint64) *clientWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	q := url.Values{"watch": {"true"}, "fieldSelector": {"metadata.name=" + name}}
	if rv > 0 {
		q.Set("resourceVersion", strconv.FormatUint(rv, 10))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path+"?"+q.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("watch %s: %v", name, err)
	}
	cw := &clientWatch{t: t, events: make(chan string, 100), done: make(chan struct{}), status: resp.StatusCode}
	go func() {
		defer close(cw.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			ev := decodeTestEvent(t, sc.Bytes())
			cw.events <- ev.String() + "/" + ev.Object.Payload
		}
	}()
	return cw
}

// testEvent is a watch event line as the tests read it.
type testEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			Name            string            `json:"name"`
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Payload string `json:"payload"`
	} `json:"object"`
}

func (e testEvent) String() string {
	return e.Type + "/" + e.Object.Metadata.Name + "/" + e.Object.Metadata.ResourceVersion
}

// decodeTestEvent decodes one watch line and checks that the object crossed the
// proxy unchanged (the fixtures' annotation x holds an escaped quote).
func decodeTestEvent(t *testing.T, line []byte) testEvent {
	t.Helper()
	var ev testEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		t.Errorf("line %q is not a JSON event: %v", line, err)
	}
	if ev.Object.Metadata.Annotations["x"] != `a"b` {
		t.Errorf("object changed in transit: %q", line)
	}
	return ev
}

// expect reads the next events and fails unless they are want, in order.
func (cw *clientWatch) expect(want ...string) {
	cw.t.Helper()
	for _, w := range want {
		select {
		case got := <-cw.events:
			if got != w {
				cw.t.Fatalf("event %q, want %q", got, w)
			}
		case <-time.After(5 * time.Second):
			cw.t.Fatalf("no event, want %q", w)
		}
	}
}

// expectNone fails if an event arrives within a short while.
func (cw *clientWatch) expectNone() {
	cw.t.Helper()
	select {
	case got := <-cw.events:
		cw.t.Fatalf("unexpected event %q", got)
	case <-time.After(200 * time.Millisecond):
	}
}

func (cw *clientWatch) expectEnded() {
	cw.t.Helper()
	select {
	case <-cw.done:
	case <-time.After(5 * time.Second):
		cw.t.Fatal("watch did not end")
	}
}

// waitWatches waits until the upstream has n watches open.
func (f *fakeWatchServer) waitWatchers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		got := len(f.watchers)
		f.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d upstream watches open, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSharedWatchFansOutOneUpstreamWatch: the name-filtered watches of many agents
// share one upstream list and watch; each gets its own object's events only, in
// order, as received.
func TestSharedWatchFansOutOneUpstreamWatch(t *testing.T) {
	f, p := newFakeWatchServer(t)
	f.set("ADDED", "", "a", "a1")
	f.set("ADDED", "", "b", "b1")
	rvC := f.set("ADDED", "", "c", "c1")

	a := startWatch(t, p, "/api/v1/nodes", "a", rvC)
	b := startWatch(t, p, "/api/v1/nodes", "b", rvC)
	c := startWatch(t, p, "/api/v1/nodes", "c", rvC)
	f.waitWatchers(t, 1)
	f.set("MODIFIED", "", "a", "a2")
	f.set("MODIFIED", "", "b", "b2")
	f.set("MODIFIED", "", "a", "a3")
	f.set("DELETED", "", "c", "c-gone")
	a.expect("MODIFIED/a/4/a2", "MODIFIED/a/6/a3")
	b.expect("MODIFIED/b/5/b2")
	c.expect("DELETED/c/7/c-gone")
	a.expectNone()
	b.expectNone()
	if lists, watches := f.counts(); lists != 1 || watches != 1 {
		t.Fatalf("upstream served %d lists and %d watches for 3 watches, want 1 and 1", lists, watches)
	}
}

// TestSharedWatchStartsFromTheClientsResourceVersion: a watch gets the object's
// current state first when it is newer than the resourceVersion it asked from
// (ADDED from none, as a real server), and nothing it has already seen.
func TestSharedWatchStartsFromTheClientsResourceVersion(t *testing.T) {
	f, p := newFakeWatchServer(t)
	f.set("ADDED", "", "a", "a1")
	rv2 := f.set("MODIFIED", "", "a", "a2")

	current := startWatch(t, p, "/api/v1/nodes", "a", rv2)
	f.waitWatchers(t, 1)
	behind := startWatch(t, p, "/api/v1/nodes", "a", 1)
	fresh := startWatch(t, p, "/api/v1/nodes", "a", 0)
	behind.expect("MODIFIED/a/2/a2")
	fresh.expect("ADDED/a/2/a2")
	current.expectNone()

	f.set("MODIFIED", "", "a", "a3")
	for _, w := range []*clientWatch{current, behind, fresh} {
		w.expect("MODIFIED/a/3/a3")
	}
	if _, watches := f.counts(); watches != 1 {
		t.Fatalf("%d upstream watches, want 1", watches)
	}
}

// TestSharedWatchEndsWithItsUpstream: when the upstream watch ends, every watch it
// served ends (their reflectors list and watch again, so nothing is lost between
// two upstream watches), and the next watch starts a new one.
func TestSharedWatchEndsWithItsUpstream(t *testing.T) {
	f, p := newFakeWatchServer(t)
	rv := f.set("ADDED", "", "a", "a1")
	a := startWatch(t, p, "/api/v1/nodes", "a", rv)
	b := startWatch(t, p, "/api/v1/nodes", "b", rv)
	f.waitWatchers(t, 1)
	f.endWatches()
	a.expectEnded()
	b.expectEnded()

	rv = f.set("MODIFIED", "", "a", "a2") // while no watch runs
	again := startWatch(t, p, "/api/v1/nodes", "a", 1)
	again.expect("MODIFIED/a/" + strconv.FormatUint(rv, 10) + "/a2")
	if lists, watches := f.counts(); lists != 2 || watches != 2 {
		t.Fatalf("upstream served %d lists and %d watches, want 2 and 2", lists, watches)
	}
}

// TestSharedWatchStopsWithItsLastClient: the upstream watch does not outlive the
// watches it serves.
func TestSharedWatchStopsWithItsLastClient(t *testing.T) {
	f, p := newFakeWatchServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+"/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Da", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	f.waitWatchers(t, 1)
	cancel()
	f.waitWatchers(t, 0)
}

// TestSharedWatchKeepsToItsNamespace: the in-memory server's namespaced watch
// sends every namespace's events; a watch of capi-inplace-system/plan-a does not
// get another namespace's plan-a.
func TestSharedWatchKeepsToItsNamespace(t *testing.T) {
	f, p := newFakeWatchServer(t)
	w := startWatch(t, p, "/api/v1/namespaces/capi-inplace-system/secrets", "plan-a", 0)
	f.waitWatchers(t, 1)
	f.set("ADDED", "elsewhere", "plan-a", "forged")
	f.set("ADDED", "capi-inplace-system", "plan-a", "mine")
	w.expect("ADDED/plan-a/2/mine")
	w.expectNone()
}

// TestSharedWatchPassesOnAnUpstreamRefusal: when the upstream refuses the shared
// list, the client's watch gets the upstream's answer, not a hang or a 200.
func TestSharedWatchPassesOnAnUpstreamRefusal(t *testing.T) {
	f, p := newFakeWatchServer(t)
	f.refuse = http.StatusForbidden
	w := startWatch(t, p, "/api/v1/nodes", "a", 0)
	if w.status != http.StatusForbidden {
		t.Fatalf("status %d, want 403", w.status)
	}
}

// TestSharedWatchRefusesABadResourceVersion: the in-memory server's
// resourceVersions are integers; anything else is the client's error.
func TestSharedWatchRefusesABadResourceVersion(t *testing.T) {
	_, p := newFakeWatchServer(t)
	resp, err := http.Get("http://" + p.addr + "/api/v1/nodes?watch=true&fieldSelector=metadata.name%3Da&resourceVersion=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

// send writes a raw line to every upstream watch.
func (f *fakeWatchServer) send(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.watchers {
		ch <- []byte(line + "\n")
	}
}

// TestSharedWatchEndsOnAnUpstreamError: bookmarks and the in-memory server's
// GENERIC events change nothing a watch is told about; an ERROR (410 Gone) ends
// the upstream watch, and with it every watch it serves.
func TestSharedWatchEndsOnAnUpstreamError(t *testing.T) {
	f, p := newFakeWatchServer(t)
	rv := f.set("ADDED", "", "a", "a1")
	w := startWatch(t, p, "/api/v1/nodes", "a", rv)
	f.waitWatchers(t, 1)
	f.send(`{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"1"}}}`)
	f.send(`{"type":"GENERIC","object":{"kind":"Node","metadata":{"name":"a","resourceVersion":"1"}}}`)
	f.set("MODIFIED", "", "a", "a2")
	w.expect("MODIFIED/a/2/a2")
	f.send(`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`)
	w.expectEnded()
}

// TestSharedWatchAcrossNamespaces: a name-filtered watch of a namespaced resource
// in every namespace (no namespace in its path) gets the objects of that name in
// each namespace, as a real server's metadata.name selector does: first their
// current states, oldest first, then their changes.
func TestSharedWatchAcrossNamespaces(t *testing.T) {
	f, p := newFakeWatchServer(t)
	f.set("ADDED", "one", "plan-a", "one-1")
	f.set("ADDED", "two", "plan-a", "two-1")
	f.set("ADDED", "two", "plan-b", "other")
	w := startWatch(t, p, "/api/v1/secrets", "plan-a", 0)
	w.expect("ADDED/plan-a/1/one-1", "ADDED/plan-a/2/two-1")
	f.waitWatchers(t, 1)
	f.set("MODIFIED", "one", "plan-a", "one-2")
	w.expect("MODIFIED/plan-a/4/one-2")
	w.expectNone()
}
