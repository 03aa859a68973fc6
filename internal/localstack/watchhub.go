package localstack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A name-filtered watch through the proxy is served from a watchHub: one upstream
// list and watch per resource (path and label selector), shared by every agent of
// the workload cluster, filtered here by name (and namespace) as a real
// kube-apiserver's watch cache filters by field. Upstream's in-memory server cannot
// filter a watch: with one upstream watch per agent, each Node or Secret event was
// encoded by the in-memory server and decoded by the proxy once per agent (33 times
// per event at 3 control planes + 30 workers), which a real cluster never pays, and
// which the rollout bench counted against the extension under test.
//
// Semantics are those of a watch on a real server, and at least those of the
// in-memory server it replaces:
//   - A watch from resourceVersion r first receives the object's current state if it
//     is newer than r (the in-memory server does the same: it lists and sends
//     objects newer than r), then every later event of the object, in order.
//   - Deletions are passed on as events; a deletion the watch did not see (it
//     happened before the watch started) is not replayed, as on the in-memory server.
//   - When the shared upstream watch ends or fails, every watch it serves ends, and
//     the clients' reflectors watch again (a fresh hub lists again): no event is
//     lost silently between two upstream watches.
//   - A client that does not read its events fast enough (watchHubBuffer behind) is
//     ended rather than allowed to stall the others; its reflector watches again.
//
// The hub stops when its last watch ends.

// watchHubBuffer is how many events a watch may fall behind before it is ended
// (the in-memory server buffers 1000 per watch).
const watchHubBuffer = 1000

// watchHubUpstreamTimeout bounds the shared upstream watch (the in-memory server's
// default is 120 s); when it ends, its watches end and are started again.
const watchHubUpstreamTimeout = 30 * time.Minute

// defaultWatchTimeout is how long a client's watch runs when it does not say
// (timeoutSeconds), as on the in-memory server.
const defaultWatchTimeout = 120 * time.Second

// watchEvent is one event of a watch stream as it travels: its object is passed
// on as received.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// hubEvent is one upstream watch event, decoded as far as the hub needs.
type hubEvent struct {
	typ       string
	name      string
	namespace string
	rv        uint64
	object    json.RawMessage
}

// hubObject is the latest state of one object the hub has seen.
type hubObject struct {
	name   string
	rv     uint64
	object json.RawMessage
}

// hubWatch is one client's watch served by a hub: of the objects named name in
// the hub's namespace (in every namespace when the hub's path names none, as a
// real server's metadata.name selector does).
type hubWatch struct {
	name string
	// after is the resourceVersion the watch has seen up to: only newer events of
	// its object are sent.
	after  uint64
	events chan hubEvent
	// closed is set (under the hub's lock) when events is closed.
	closed bool
}

type watchHub struct {
	key    string
	path   string
	labels string
	cancel context.CancelFunc
	ready  chan struct{} // closed once the hub has listed and its upstream watch runs
	refs   int           // watches waiting for or served by the hub (apiProxy.hubsMu)
	// namespace is the namespace of a namespaced resource's path: the in-memory
	// server's watch sends the events of every namespace.
	namespace string

	mu      sync.Mutex
	err     error // why the hub could not start (set before ready is closed)
	ended   bool
	objects map[string]hubObject // namespace/name -> latest state
	watches map[*hubWatch]struct{}
}

// hubKey identifies the upstream watch a name-filtered watch can share: the
// resource's path and the label selector.
func hubKey(path string, q url.Values) string {
	return strings.TrimSuffix(path, "/") + "?" + q.Get("labelSelector")
}

// sharedWatch serves a watch of the object named name from the resource's hub,
// and falls back to a watch of its own when the hub cannot start (the client then
// gets the upstream's answer, e.g. an authorization error).
func (p *apiProxy) sharedWatch(w http.ResponseWriter, r *http.Request, name string) {
	q := r.URL.Query()
	after, err := parseResourceVersion(q.Get("resourceVersion"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	timeout := defaultWatchTimeout
	if s := q.Get("timeoutSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("timeoutSeconds %q: not a number of seconds", s), http.StatusBadRequest)
			return
		}
		if n > 0 {
			timeout = time.Duration(n) * time.Second
		}
	}
	h := p.acquireHub(r.URL.Path, q)
	defer p.releaseHub(h)
	select {
	case <-h.ready:
	case <-r.Context().Done():
		return
	}
	if h.startErr() != nil {
		p.watch(w, r, name)
		return
	}
	hw, initial := h.subscribe(name, after)
	defer h.unsubscribe(hw)

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(ev hubEvent) bool {
		typ, _ := json.Marshal(ev.typ)
		if _, err := fmt.Fprintf(w, "{\"type\":%s,\"object\":%s}\n", typ, ev.object); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if flusher != nil {
		flusher.Flush() // the headers, before any event
	}
	for _, ev := range initial {
		if !send(ev) {
			return
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-timer.C:
			return
		case ev, ok := <-hw.events:
			if !ok || !send(ev) {
				return
			}
		}
	}
}

// acquireHub returns the running hub for the resource, starting one if there is
// none; releaseHub must follow.
func (p *apiProxy) acquireHub(path string, q url.Values) *watchHub {
	key := hubKey(path, q)
	p.hubsMu.Lock()
	defer p.hubsMu.Unlock()
	if h := p.hubs[key]; h != nil && !h.hasEnded() {
		h.refs++
		return h
	}
	if p.hubs == nil {
		p.hubs = map[string]*watchHub{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &watchHub{
		key: key, path: path, labels: q.Get("labelSelector"), namespace: namespaceOf(path), cancel: cancel,
		ready: make(chan struct{}), refs: 1,
		objects: map[string]hubObject{}, watches: map[*hubWatch]struct{}{},
	}
	p.hubs[key] = h
	go h.run(ctx, p)
	return h
}

// releaseHub stops the hub when its last watch has ended.
func (p *apiProxy) releaseHub(h *watchHub) {
	p.hubsMu.Lock()
	defer p.hubsMu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if p.hubs[h.key] == h {
		delete(p.hubs, h.key)
	}
	h.cancel()
}

// closeHubs stops every hub (the proxy is closing); their watches end.
func (p *apiProxy) closeHubs() {
	p.hubsMu.Lock()
	defer p.hubsMu.Unlock()
	for k, h := range p.hubs {
		h.cancel()
		delete(p.hubs, k)
	}
}

// run lists the resource, then watches it from the list's resourceVersion until
// the upstream watch ends or the hub is stopped; then it ends every watch.
func (h *watchHub) run(ctx context.Context, p *apiProxy) {
	defer h.end()
	body, err := h.start(ctx, p)
	if err != nil {
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
		close(h.ready)
		return
	}
	// Stopping the hub cancels ctx, which ends the read below.
	defer body.Close()
	close(h.ready)
	dec := json.NewDecoder(body)
	for {
		var raw watchEvent
		if err := dec.Decode(&raw); err != nil {
			return
		}
		switch raw.Type {
		case "ADDED", "MODIFIED", "DELETED":
		case "ERROR":
			// E.g. 410 Gone: the upstream watch is over; its watches end and
			// their reflectors list again.
			return
		default:
			// BOOKMARK, and the in-memory server's GENERIC: no change of an
			// object a watch is told about.
			continue
		}
		ev, err := decodeHubEvent(raw.Type, raw.Object)
		if err != nil {
			return
		}
		h.publish(ev)
	}
}

// start lists the resource into the hub and opens the upstream watch from the
// list's resourceVersion.
func (h *watchHub) start(ctx context.Context, p *apiProxy) (io.ReadCloser, error) {
	q := url.Values{}
	if h.labels != "" {
		q.Set("labelSelector", h.labels)
	}
	list, err := p.get(ctx, h.path, q)
	if err != nil {
		return nil, err
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(list, &l); err != nil {
		return nil, fmt.Errorf("list %s: %w", h.path, err)
	}
	for _, it := range l.Items {
		ev, err := decodeHubEvent("ADDED", it)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", h.path, err)
		}
		h.objects[objectKey(ev.namespace, ev.name)] = hubObject{name: ev.name, rv: ev.rv, object: ev.object}
	}
	q.Set("watch", "true")
	q.Set("resourceVersion", l.Metadata.ResourceVersion)
	q.Set("timeoutSeconds", strconv.Itoa(int(watchHubUpstreamTimeout/time.Second)))
	resp, err := p.open(ctx, h.path, q)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// publish records an event and passes it to the watches of its object.
func (h *watchHub) publish(ev hubEvent) {
	if h.namespace != "" && ev.namespace != h.namespace {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	key := objectKey(ev.namespace, ev.name)
	if ev.typ == "DELETED" {
		delete(h.objects, key)
	} else {
		if cur, ok := h.objects[key]; ok && cur.rv >= ev.rv {
			return // already listed or seen
		}
		h.objects[key] = hubObject{name: ev.name, rv: ev.rv, object: ev.object}
	}
	for hw := range h.watches {
		// A deletion is passed on whatever its resourceVersion: the in-memory
		// server may send it with the object's last one.
		if hw.closed || hw.name != ev.name || (ev.typ != "DELETED" && ev.rv <= hw.after) {
			continue
		}
		select {
		case hw.events <- ev:
			hw.after = max(hw.after, ev.rv)
		default:
			// Too far behind: end this watch; its reflector watches again.
			hw.closed = true
			close(hw.events)
		}
	}
}

// subscribe registers a watch of the objects named name from resourceVersion
// after and returns the current state of each that is newer as its first events.
func (h *watchHub) subscribe(name string, after uint64) (*hubWatch, []hubEvent) {
	hw := &hubWatch{name: name, after: after, events: make(chan hubEvent, watchHubBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		hw.closed = true
		close(hw.events)
		return hw, nil
	}
	typ := "MODIFIED"
	if after == 0 {
		typ = "ADDED" // a watch from no resourceVersion starts with ADDED, as on a real server
	}
	var initial []hubEvent
	for _, obj := range h.objects {
		if obj.name == name && obj.rv > after {
			initial = append(initial, hubEvent{typ: typ, name: name, rv: obj.rv, object: obj.object})
		}
	}
	// In resourceVersion order, as a watch sends them; the watch has then seen
	// up to the newest.
	slices.SortFunc(initial, func(a, b hubEvent) int { return cmp.Compare(a.rv, b.rv) })
	if n := len(initial); n > 0 {
		hw.after = initial[n-1].rv
	}
	h.watches[hw] = struct{}{}
	return hw, initial
}

func (h *watchHub) unsubscribe(hw *hubWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watches, hw)
}

// end ends every watch of the hub; their clients watch again, on a new hub.
func (h *watchHub) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	for hw := range h.watches {
		if !hw.closed {
			hw.closed = true
			close(hw.events)
		}
	}
}

func (h *watchHub) hasEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

func (h *watchHub) startErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// decodeHubEvent reads the name, namespace and resourceVersion of an event's
// object; the object itself is passed on as received.
func decodeHubEvent(typ string, object json.RawMessage) (hubEvent, error) {
	var meta struct {
		Metadata struct {
			Name            string `json:"name"`
			Namespace       string `json:"namespace"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(object, &meta); err != nil {
		return hubEvent{}, fmt.Errorf("decode watch event: %w", err)
	}
	rv, err := parseResourceVersion(meta.Metadata.ResourceVersion)
	if err != nil {
		return hubEvent{}, err
	}
	return hubEvent{typ: typ, name: meta.Metadata.Name, namespace: meta.Metadata.Namespace, rv: rv, object: object}, nil
}

// parseResourceVersion reads the in-memory server's resourceVersions, which are
// integers (a real server's are opaque; this proxy only fronts the in-memory one).
func parseResourceVersion(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("resourceVersion %q: not an integer", s)
	}
	return rv, nil
}

func objectKey(namespace, name string) string { return namespace + "/" + name }

// namespaceOf returns the namespace of a namespaced resource path
// (/api/v1/namespaces/<ns>/secrets, /apis/<g>/<v>/namespaces/<ns>/<r>), else "".
func namespaceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] == "namespaces" {
			return parts[i+1]
		}
	}
	return ""
}

// get reads path upstream and returns the body of a 200 answer.
func (p *apiProxy) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	resp, err := p.open(ctx, path, q)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// open sends a GET for path upstream and returns a 200 answer, else an error.
func (p *apiProxy) open(ctx context.Context, path string, q url.Values) (*http.Response, error) {
	u := *p.upstream
	u.Path = path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, errors.New(resp.Status + ": " + strings.TrimSpace(string(b)))
	}
	return resp, nil
}
