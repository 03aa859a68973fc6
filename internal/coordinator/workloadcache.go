package coordinator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
)

// InformerWorkloadCaches watches, in each workload cluster a call asked about, what
// a steady-state call reads there: its Nodes (without their image lists and managed
// fields), the plan Secrets (namespace capi-inplace-system, label PlanNodeLabel; of
// the sealed plan only its header, stripPlan) and the agent's DaemonSet. It is
// bounded: a cluster no call asked about for Idle is dropped (its watches end), and
// at most Max clusters are watched (the least recently used is dropped first).
// Clusters reached at the same API server with the same credentials (the bench's
// clusters, which all point at one API server) share one set of watches: they are one
// cluster as far as the caches are concerned. A cache that is not synced yet, or whose watch failed in
// the last WatchErrorGrace, is not served: the call reads live (and learns whether
// the cluster answers). The DaemonSet is judged apart from Nodes and plan Secrets:
// only a coordinator that manages agents reads it, and a cluster that does not
// serve DaemonSets to us (no RBAC for them, or Cluster API's in-memory workload
// API server, which has no apps group) must not keep the Nodes and plan Secrets
// from being served; a DaemonSet read answers errNotSynced then (the call reads live).
//
// Cluster API's clustercache (sigs.k8s.io/cluster-api/controllers/clustercache) is
// not used: it connects to every Cluster of the management cluster (not only those
// updating), its reconciler runs only on the elected leader while every replica
// answers hooks, and its health probe adds requests to every workload cluster.
type InformerWorkloadCaches struct {
	scheme *runtime.Scheme
	opts   WorkloadCacheOptions

	mu      sync.Mutex
	entries map[endpoint]*workloadCache
	// last is the endpoint each cluster was last served from (Forget).
	last map[client.ObjectKey]endpoint
}

// endpoint identifies an API server and the credentials used there.
type endpoint [sha256.Size]byte

func endpointOf(cfg *rest.Config) endpoint {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(cfg.Host), []byte(cfg.APIPath), []byte(cfg.ServerName), cfg.CAData, []byte(cfg.CAFile),
		cfg.CertData, []byte(cfg.CertFile), cfg.KeyData, []byte(cfg.KeyFile), []byte(cfg.BearerToken), []byte(cfg.BearerTokenFile),
		[]byte(cfg.Username), []byte(cfg.Password)} {
		_, _ = fmt.Fprintf(h, "%d:", len(part))
		_, _ = h.Write(part)
	}
	var e endpoint
	copy(e[:], h.Sum(nil))
	return e
}

// WorkloadCacheOptions bound InformerWorkloadCaches.
type WorkloadCacheOptions struct {
	// Idle drops a cluster's caches when no call asked about it for this long.
	// Zero: 10 minutes.
	Idle time.Duration
	// Max is the number of clusters watched at once. Zero: 200.
	Max int
	// WatchErrorGrace: a cache whose watch failed this recently is not served.
	// Zero: 30 s.
	WatchErrorGrace time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

type workloadCache struct {
	cached   *WorkloadCluster
	cancel   context.CancelFunc
	synced   atomic.Bool  // the Node and plan Secret informers
	watchErr atomic.Int64 // unix nanoseconds of the last watch error of Nodes or plan Secrets
	// daemonSet is the DaemonSet informer once started; dsWatchErr its last
	// watch error (unix nanoseconds).
	daemonSet  atomic.Pointer[cache.Informer]
	dsWatchErr atomic.Int64
	lastUsed   time.Time

	mu sync.Mutex
	// changed holds, per Node name, the channel closed at that Node's next
	// event; made when a call first waits on the Node, removed when closed.
	changed map[string]chan struct{}
}

// NewInformerWorkloadCaches returns empty caches; scheme must know the core and apps
// Kubernetes types.
func NewInformerWorkloadCaches(scheme *runtime.Scheme, o WorkloadCacheOptions) *InformerWorkloadCaches {
	if o.Idle <= 0 {
		o.Idle = 10 * time.Minute
	}
	if o.Max <= 0 {
		o.Max = 200
	}
	if o.WatchErrorGrace <= 0 {
		o.WatchErrorGrace = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &InformerWorkloadCaches{scheme: scheme, opts: o, entries: map[endpoint]*workloadCache{}, last: map[client.ObjectKey]endpoint{}}
}

// For implements WorkloadCaches. The first call for a cluster starts its watches and
// answers ok false; later calls are served once they synced.
func (w *InformerWorkloadCaches) For(_ context.Context, key client.ObjectKey, wc *WorkloadCluster, node string) (*WorkloadCluster, <-chan struct{}, bool) {
	if wc == nil || wc.Config == nil {
		return nil, nil, false
	}
	now := w.opts.Now()
	// Rotated credentials are another endpoint: new watches (the old ones idle out).
	ep := endpointOf(wc.Config)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evictLocked(now)
	w.last[key] = ep
	e := w.entries[ep]
	if e == nil {
		var err error
		if e, err = w.start(wc); err != nil {
			return nil, nil, false
		}
		w.entries[ep] = e
		w.evictLocked(now)
	}
	e.lastUsed = now
	if !e.synced.Load() || now.Sub(time.Unix(0, e.watchErr.Load())) < w.opts.WatchErrorGrace {
		return nil, nil, false
	}
	return e.cached, e.changes(node), true
}

// Forget implements WorkloadCaches.
func (w *InformerWorkloadCaches) Forget(key client.ObjectKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ep, ok := w.last[key]
	if !ok {
		return
	}
	delete(w.last, key)
	if e, ok := w.entries[ep]; ok {
		e.cancel()
		delete(w.entries, ep)
	}
}

// Len is the number of clusters watched.
func (w *InformerWorkloadCaches) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.entries)
}

// Stop ends every watch.
func (w *InformerWorkloadCaches) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, e := range w.entries {
		e.cancel()
		delete(w.entries, k)
	}
}

// evictLocked drops idle clusters, then the least recently used beyond Max (the
// newest entry, just added, is the most recently used).
func (w *InformerWorkloadCaches) evictLocked(now time.Time) {
	for k, e := range w.entries {
		if now.Sub(e.lastUsed) > w.opts.Idle {
			e.cancel()
			delete(w.entries, k)
		}
	}
	for k, ep := range w.last {
		if _, ok := w.entries[ep]; !ok {
			delete(w.last, k)
		}
	}
	for len(w.entries) > w.opts.Max {
		var oldest endpoint
		var at time.Time
		first := true
		for k, e := range w.entries {
			if first || e.lastUsed.Before(at) {
				oldest, at, first = k, e.lastUsed, false
			}
		}
		w.entries[oldest].cancel()
		delete(w.entries, oldest)
	}
}

// start builds the cluster's caches and starts their watches in the background.
func (w *InformerWorkloadCaches) start(wc *WorkloadCluster) (*workloadCache, error) {
	e := &workloadCache{changed: map[string]chan struct{}{}, lastUsed: w.opts.Now()}
	cfg := rest.CopyConfig(wc.Config)
	// The request timeout of the call clients would end every watch.
	cfg.Timeout = 0
	planSecrets, err := labels.NewRequirement(inplacev1.PlanNodeLabel, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	agentNS := map[string]cache.Config{inplacev1.AgentNamespace: {}}
	c, err := cache.New(cfg, cache.Options{
		Scheme: w.scheme,
		Mapper: wc.Client.RESTMapper(),
		// Only the kinds below are cached; a read of another kind fails (and the
		// call reads live) instead of starting a watch.
		ReaderFailOnMissingInformer: true,
		DefaultWatchErrorHandler: func(ctx context.Context, r *toolscache.Reflector, err error) {
			if r.TypeDescription() == daemonSetType {
				e.dsWatchErr.Store(w.opts.Now().UnixNano())
			} else {
				e.watchErr.Store(w.opts.Now().UnixNano())
			}
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Node{}:      {Transform: stripNode},
			&corev1.Secret{}:    {Namespaces: agentNS, Label: labels.NewSelector().Add(*planSecrets), Transform: stripPlan},
			&appsv1.DaemonSet{}: {Namespaces: agentNS, Field: fields.OneTermEqualSelector("metadata.name", agentinstall.AgentName), Transform: cache.TransformStripManagedFields()},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("workload cache: %w", err)
	}
	guarded := daemonSetGuard{Reader: c, ready: func() bool {
		inf := e.daemonSet.Load()
		return inf != nil && (*inf).HasSynced() && w.opts.Now().Sub(time.Unix(0, e.dsWatchErr.Load())) >= w.opts.WatchErrorGrace
	}}
	reads, err := client.New(wc.Config, client.Options{Scheme: w.scheme, Mapper: wc.Client.RESTMapper(), Cache: &client.CacheOptions{Reader: guarded}})
	if err != nil {
		return nil, fmt.Errorf("workload cache client: %w", err)
	}
	e.cached = &WorkloadCluster{Client: reads, Clientset: wc.Clientset, Config: wc.Config}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		var served []toolscache.InformerSynced // Nodes and plan Secrets
		for _, obj := range []client.Object{&corev1.Node{}, &corev1.Secret{}, &appsv1.DaemonSet{}} {
			inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
			if err != nil {
				cancel()
				return
			}
			switch obj.(type) {
			case *corev1.Node:
				notify := func(obj any) {
					if name, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
						e.notify(name) // a Node's key is its name
					}
				}
				_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
					AddFunc: notify, UpdateFunc: func(_, o any) { notify(o) }, DeleteFunc: notify,
				})
				served = append(served, inf.HasSynced)
			case *appsv1.DaemonSet:
				e.daemonSet.Store(&inf)
			default:
				served = append(served, inf.HasSynced)
			}
		}
		go func() { _ = c.Start(ctx) }()
		if toolscache.WaitForCacheSync(ctx.Done(), served...) {
			e.synced.Store(true)
		}
	}()
	return e, nil
}

// daemonSetType is the reflector's TypeDescription of the DaemonSet informer.
var daemonSetType = reflect.TypeOf(&appsv1.DaemonSet{}).String()

// daemonSetGuard answers errNotSynced for DaemonSet reads while the DaemonSet
// informer is not synced or its watch failed recently: the cache's own read would
// wait for a sync that may never come. Other reads go to the cache.
type daemonSetGuard struct {
	client.Reader
	ready func() bool
}

func (g daemonSetGuard) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*appsv1.DaemonSet); ok && !g.ready() {
		return errNotSynced
	}
	return g.Reader.Get(ctx, key, obj, opts...)
}

func (g daemonSetGuard) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*appsv1.DaemonSetList); ok && !g.ready() {
		return errNotSynced
	}
	return g.Reader.List(ctx, list, opts...)
}

// changes is closed at the next event of the Node named node. Each Node has its
// own channel: ten nodes updating at once (or, in the bench, every cluster behind
// one API server) would otherwise wake every waiting call at every agent's write.
func (e *workloadCache) changes(node string) <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.changed[node]
	if !ok {
		ch = make(chan struct{})
		e.changed[node] = ch
	}
	return ch
}

func (e *workloadCache) notify(node string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.changed[node]; ok {
		close(ch)
		delete(e.changed, node)
	}
}

// stripNode drops what a steady-state call never reads of a Node and what makes
// most of its size: managed fields and the list of images on the node.
func stripNode(in any) (any, error) {
	if n, ok := in.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status.Images = nil
	}
	return in, nil
}

// stripPlan keeps of a plan Secret what a steady-state call reads: the header of the
// sealed plan (plan hash, recipient, pin: nodeplan.Holds and nodeplan.Published) and
// as many bytes of its ciphertext as protocol.DecodeSealedPlan requires (its tag's
// length). The cached copy is never opened nor written back: publishing reads live.
func stripPlan(in any) (any, error) {
	if s, ok := in.(*corev1.Secret); ok {
		s.ManagedFields = nil
		if data := s.Data[inplacev1.PlanSecretDataKey]; data != nil {
			if i := bytes.IndexByte(data, '\n'); i >= 0 && len(data) > i+1+sealTag {
				s.Data[inplacev1.PlanSecretDataKey] = bytes.Clone(data[:i+1+sealTag])
			}
		}
	}
	return in, nil
}

// sealTag is the length of the AES-GCM tag that ends a sealed plan's ciphertext.
const sealTag = 16
