package localstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/workload"
)

// apiProxy sits between the simulated agents and an in-memory workload API server
// and fills in standard API behaviour that upstream's fake server (CAPI v1.14.2
// test/infrastructure/inmemory) lacks, so that the agents run the code paths they
// run against a real kube-apiserver (see test/e2e/README.md for the measured gaps):
//
//   - field selector metadata.name=<n> on lists and watches (the fake server answers
//     500, or an empty watch): lists forwarded without it and filtered here, watches
//     served from one shared upstream watch per resource (watchhub.go);
//   - the status subresource (404 there): forwarded to the main resource, where the
//     fake server keeps status;
//   - every PATCH (JSON patch is 415 there; a merge patch is accepted but the fake
//     server then stores the object as unstructured, after which its own typed lists
//     of that kind fail, e.g. its etcd emulation listing Pods): applied here to the
//     current object and sent as a PUT, which the fake server decodes into the typed
//     object; retried on a conflict, as a server-side patch would not conflict;
//   - control-plane static pods: the fake server creates kube-system/<component>-<node>
//     without the kubernetes.io/config.mirror annotation a real kubelet's mirror pods
//     carry, so a drain would treat them as unmanaged pods; the proxy adds it.
//
// Everything else passes through unchanged. The proxy listens on plain HTTP on
// 127.0.0.1 and authenticates upstream with the workload kubeconfig's credentials.
type apiProxy struct {
	upstream *url.URL
	client   *http.Client
	server   *http.Server
	addr     string

	hubsMu sync.Mutex
	hubs   map[string]*watchHub // shared upstream watches (watchhub.go), by hubKey
}

// startAPIProxy starts a proxy for the workload cluster reached by kubeconfig.
func startAPIProxy(kubeconfig []byte, cluster client.ObjectKey) (*apiProxy, error) {
	cfg, err := workload.RESTConfig(kubeconfig, cluster, workload.Options{UserAgent: "capi-inplace-localstack-proxy"})
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("workload HTTP client: %w", err)
	}
	up, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("workload server %q: %w", cfg.Host, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for API proxy: %w", err)
	}
	p := &apiProxy{upstream: up, client: hc, addr: l.Addr().String()}
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.server.Serve(l) }()
	return p, nil
}

// kubeconfig returns a kubeconfig for the proxy (plain HTTP, no credentials).
func (p *apiProxy) kubeconfig() []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: workload
  cluster:
    server: http://%s
contexts:
- name: workload
  context:
    cluster: workload
    user: proxy
users:
- name: proxy
  user: {}
current-context: workload
`, p.addr))
}

func (p *apiProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.closeHubs()
	_ = p.server.Shutdown(ctx)
	_ = p.server.Close()
}

func (p *apiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Status subresource: the fake server stores status with the object.
	if parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); len(parts) >= 4 && parts[len(parts)-1] == "status" &&
		(parts[len(parts)-3] == "nodes" || parts[len(parts)-3] == "pods") {
		r.URL.Path = strings.TrimSuffix(r.URL.Path, "/status")
	}
	if r.Method == http.MethodPatch {
		p.patch(w, r)
		return
	}
	q := r.URL.Query()
	name, ok := nameSelector(q.Get("fieldSelector"))
	isPods := strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/pods")
	if r.Method == http.MethodGet && ok && !isPods {
		q.Del("fieldSelector")
		r.URL.RawQuery = q.Encode()
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			p.sharedWatch(w, r, name)
		} else {
			p.list(w, r, name)
		}
		return
	}
	if r.Method == http.MethodGet && isPods {
		p.list(w, r, "")
		return
	}
	p.pass(w, r)
}

// nameSelector recognises a field selector that only selects metadata.name.
func nameSelector(sel string) (string, bool) {
	for _, prefix := range []string{"metadata.name==", "metadata.name="} {
		if strings.HasPrefix(sel, prefix) && !strings.Contains(sel, ",") {
			return strings.TrimPrefix(sel, prefix), true
		}
	}
	return "", false
}

func (p *apiProxy) forward(r *http.Request, body io.Reader) (*http.Response, error) {
	u := *p.upstream
	u.Path = r.URL.Path
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	return p.client.Do(req)
}

func (p *apiProxy) pass(w http.ResponseWriter, r *http.Request) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(p.upstream)
			pr.Out.URL.Path = r.URL.Path
			pr.Out.URL.RawPath = ""
		},
		Transport:     p.client.Transport,
		FlushInterval: -1,
	}
	rp.ServeHTTP(w, r)
}

// list forwards a GET and, for list responses, keeps only items named name (when
// set) and marks control-plane static pods as mirror pods.
func (p *apiProxy) list(w http.ResponseWriter, r *http.Request, name string) {
	if q := r.URL.Query(); q.Get("watch") == "true" || q.Get("watch") == "1" {
		p.watch(w, r, name)
		return
	}
	resp, err := p.forward(r, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode == http.StatusOK {
		var obj map[string]any
		if json.Unmarshal(body, &obj) == nil {
			if items, ok := obj["items"].([]any); ok {
				kept := make([]any, 0, len(items))
				for _, it := range items {
					m, _ := it.(map[string]any)
					if name != "" && objName(m) != name {
						continue
					}
					markMirror(m)
					kept = append(kept, m)
				}
				obj["items"] = kept
			} else {
				markMirror(obj)
			}
			if b, err := json.Marshal(obj); err == nil {
				body = b
			}
		}
	}
	copyHeader(w, resp)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// watch forwards a watch and passes on only events for objects named name (and
// bookmarks), one JSON object per line as a real server sends them. The fake
// server sends every watcher every object of the kind (a real one filters in its
// watch cache), so with an agent per node each Node event reaches every agent's
// watch here: an event is decoded only as far as the object's name, and passed
// on as received, unless it is a pod (markMirror edits it).
func (p *apiProxy) watch(w http.ResponseWriter, r *http.Request, name string) {
	resp, err := p.forward(r, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	copyHeader(w, resp)
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	pods := strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/pods")
	dec := json.NewDecoder(resp.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			return
		}
		if ev.Type != "BOOKMARK" && name != "" {
			var meta struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if json.Unmarshal(ev.Object, &meta) != nil || meta.Metadata.Name != name {
				continue
			}
		}
		object := []byte(ev.Object)
		if pods {
			var obj map[string]any
			if json.Unmarshal(object, &obj) == nil {
				markMirror(obj)
				if b, err := json.Marshal(obj); err == nil {
					object = b
				}
			}
		}
		typ, _ := json.Marshal(ev.Type)
		if _, err := fmt.Fprintf(w, "{\"type\":%s,\"object\":%s}\n", typ, object); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// patch applies a JSON, merge or strategic merge patch (the last as a merge patch,
// as the fake server itself does) to the current object and PUTs the result.
func (p *apiProxy) patch(w http.ResponseWriter, r *http.Request) {
	patchBody, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ct := r.Header.Get("Content-Type")
	var apply func([]byte) ([]byte, error)
	switch {
	case strings.HasPrefix(ct, "application/json-patch+json"):
		jp, err := jsonpatch.DecodePatch(patchBody)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		apply = jp.Apply
	case strings.HasPrefix(ct, "application/merge-patch+json"), strings.HasPrefix(ct, "application/strategic-merge-patch+json"):
		apply = func(doc []byte) ([]byte, error) { return jsonpatch.MergePatch(doc, patchBody) }
	default:
		http.Error(w, "unsupported patch type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	for attempt := 0; ; attempt++ {
		get := r.Clone(r.Context())
		get.Method = http.MethodGet
		get.Header = http.Header{"Accept": []string{"application/json"}}
		get.URL.RawQuery = ""
		resp, err := p.forward(get, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		current, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			copyHeader(w, resp)
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(current)
			return
		}
		patched, err := apply(current)
		if err != nil {
			http.Error(w, fmt.Sprintf("apply patch: %v", err), http.StatusUnprocessableEntity)
			return
		}
		put := r.Clone(r.Context())
		put.Method = http.MethodPut
		put.Header = http.Header{"Content-Type": []string{"application/json"}, "Accept": []string{"application/json"}}
		put.URL.RawQuery = ""
		resp, err = p.forward(put, bytes.NewReader(patched))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		if resp.StatusCode == http.StatusConflict && attempt < 5 {
			resp.Body.Close()
			continue
		}
		defer resp.Body.Close()
		copyHeader(w, resp)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		return
	}
}

func objName(m map[string]any) string {
	md, _ := m["metadata"].(map[string]any)
	n, _ := md["name"].(string)
	return n
}

// markMirror adds kubernetes.io/config.mirror to the fake server's control-plane
// static pods (kube-system, component label, no owner), as a kubelet would.
func markMirror(m map[string]any) {
	if m == nil || m["kind"] != "Pod" && m["kind"] != nil {
		return
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil || md["namespace"] != "kube-system" || md["ownerReferences"] != nil {
		return
	}
	labels, _ := md["labels"].(map[string]any)
	if labels == nil || (labels["component"] == nil && labels["tier"] != "control-plane") {
		return
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	if _, ok := ann["kubernetes.io/config.mirror"]; !ok {
		ann["kubernetes.io/config.mirror"] = "capi-in-memory-static-pod"
	}
}

func copyHeader(w http.ResponseWriter, resp *http.Response) {
	for k, v := range resp.Header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = v
	}
}

// writeProxyKubeconfig starts a proxy for the workload kubeconfig kc and writes a
// kubeconfig for it into dir.
func writeProxyKubeconfig(kc []byte, cluster client.ObjectKey, dir, name string) (*apiProxy, string, error) {
	p, err := startAPIProxy(kc, cluster)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, p.kubeconfig(), 0o600); err != nil {
		p.close()
		return nil, "", errors.Join(fmt.Errorf("write proxy kubeconfig: %w", err))
	}
	return p, path, nil
}
