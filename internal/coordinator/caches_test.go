package coordinator

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// requests counts the HTTP requests of every client built on a config it wrapped,
// and of them the GETs of a single Machine and the lists (not watches) of Nodes.
type requests struct{ n, machineGets, nodeLists atomic.Int64 }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *requests) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.n.Add(1)
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/machines/") {
				c.machineGets.Add(1)
			}
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/api/v1/nodes") && r.URL.Query().Get("watch") != "true" {
				c.nodeLists.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

// cachedCoordinator is the fixture's coordinator with caches over its API server, as
// `capi-inplace extension` wires them, every request counted in n.
func (f *fixture) cachedCoordinator(n *requests, mutate ...func(*Options)) *Coordinator {
	f.t.Helper()
	g := NewWithT(f.t)
	cfg := n.wrap(testEnv.Require(f.t))
	live, err := client.New(cfg, client.Options{Scheme: f.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	informers, err := cache.New(cfg, cache.Options{Scheme: f.scheme, Mapper: live.RESTMapper()})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	go func() { _ = informers.Start(ctx) }()
	wc, err := NewWorkloadCluster(cfg, f.scheme, 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	workloads := NewInformerWorkloadCaches(f.scheme, WorkloadCacheOptions{})
	f.t.Cleanup(workloads.Stop)
	opts := Options{Client: live, Clusters: StaticClusters{Cluster: wc}, Recorder: f.rec, Linger: -1,
		Caches: &Caches{Management: SyncedReader{Cache: informers}, Secrets: NewSecretCache(SyncedReader{Cache: informers}, live, 0), Workloads: workloads}}
	for _, m := range mutate {
		m(&opts)
	}
	c, err := New(opts)
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// steady calls until a call makes no request (the caches synced), at most 10 s, and
// returns its answer.
func steady(t *testing.T, c *Coordinator, n *requests, req *runtimehooksv1.UpdateMachineRequest) *runtimehooksv1.UpdateMachineResponse {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := n.n.Load()
		resp := call(c, req)
		if n.n.Load() == before {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls still make requests (%d in the last) after 10 s; last answer %q", n.n.Load()-before, resp.Message)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSteadyStateCallsAnswerFromCaches: while the agent works, a call answers exactly
// what a live call answers without a single API request (management or workload);
// the answer that ends the update is decided on live reads and acts on the API.
// Without caches (the old code) every such call makes at least six GETs.
func TestSteadyStateCallsAnswerFromCaches(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cache-w1", "v1.35.0", false)
	g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "tls"},
		Data:       map[string][]byte{"tls.crt": []byte("CERTIFICATE")},
	})).To(Succeed())
	m := f.machine("m-cache-w1", "cache-w1", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{
		{Path: "/etc/pki/tls.crt", ContentFrom: bootstrapv1.FileSource{Secret: bootstrapv1.SecretFileSource{Name: "tls", Key: "tls.crt"}}},
	}}})
	agent := func(o *Options) { o.ManageAgents = true; o.AgentImage = "registry.example/capi-inplace:test" }
	live := f.coordinator(agent)
	callUntil(t, live, req, "pick up plan", 5)
	hash := f.getNode("cache-w1").Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports("cache-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 1, Steps: 2, Action: "files"}, false)
	want := call(live, req)
	g.Expect(want.Message).To(ContainSubstring("to apply plan"))

	n := &requests{}
	cached := f.cachedCoordinator(n, agent)
	resp := steady(t, cached, n, req)
	g.Expect(resp).To(Equal(want))
	before := n.n.Load()
	for range 20 {
		g.Expect(call(cached, req)).To(Equal(want))
	}
	g.Expect(n.n.Load()-before).To(BeZero(), "requests in 20 steady-state calls")

	// A stale read is safe: the node committed, but until the cache has seen it the
	// answer is at most "in progress"; once it has, done is decided (and the node
	// uncordoned) on live reads.
	f.agentReports("cache-w1", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 2, Steps: 2}, true)
	f.setKubelet("cache-w1", "v1.36.0")
	g.Eventually(func() int32 {
		r := call(cached, req)
		g.Expect(r.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), r.Message)
		if r.RetryAfterSeconds == 0 {
			g.Expect(r.Message).To(Equal("node cache-w1 runs plan " + hash[:12]))
		}
		return r.RetryAfterSeconds
	}).WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(BeZero())
	g.Expect(f.getNode("cache-w1").Spec.Unschedulable).To(BeFalse())
	g.Expect(f.getNode("cache-w1").Annotations).NotTo(HaveKey(inplacev1.CordonedByAnnotation))
}

// aheadCaches serve a workload cluster whose cached Node says what the test wants,
// whatever the API says: a cache that is wrong in the worst direction.
type aheadCaches struct {
	node *corev1.Node
}

func (a aheadCaches) For(_ context.Context, _ client.ObjectKey, wc *WorkloadCluster, _ string) (*WorkloadCluster, <-chan struct{}, bool) {
	return &WorkloadCluster{Client: nodeOverride{Client: wc.Client, node: a.node}, Clientset: wc.Clientset}, nil, true
}
func (aheadCaches) Forget(client.ObjectKey) {}

type nodeOverride struct {
	client.Client
	node *corev1.Node
}

func (o nodeOverride) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if n, ok := obj.(*corev1.Node); ok && key.Name == o.node.Name {
		o.node.DeepCopyInto(n)
		return nil
	}
	return o.Client.Get(ctx, key, obj, opts...)
}

// TestCachedReadsNeverAnswerDone: even a cache claiming the node committed the plan
// and runs the target version cannot make a call answer done or uncordon the node:
// only "in progress" answers come from caches; done is decided on live reads, which
// say the agent is still applying.
func TestCachedReadsNeverAnswerDone(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cache-w2", "v1.35.0", false)
	m := f.machine("m-cache-w2", "cache-w2", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	live := f.coordinator()
	callUntil(t, live, req, "pick up plan", 5)
	hash := f.getNode("cache-w2").Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports("cache-w2", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 1, Steps: 2}, false)

	claimed := f.getNode("cache-w2")
	v, err := protocol.EncodeStatus(protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 2, Steps: 2})
	g.Expect(err).NotTo(HaveOccurred())
	claimed.Annotations[inplacev1.StatusAnnotation] = v
	claimed.Annotations[inplacev1.CurrentPlanAnnotation] = hash
	claimed.Status.NodeInfo.KubeletVersion = "v1.36.0"
	c := f.coordinator(func(o *Options) {
		o.Caches = &Caches{Management: f.mgmt, Secrets: f.mgmt, Workloads: aheadCaches{node: claimed}}
	})
	resp := call(c, req)
	g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.RetryAfterSeconds).To(Equal(int32(1)))
	g.Expect(resp.Message).To(ContainSubstring("to apply plan " + hash[:12]))
	g.Expect(f.getNode("cache-w2").Spec.Unschedulable).To(BeTrue(), "still cordoned")
}

// TestLingerWaitsOnTheWatch: a lingering call served from caches makes no request
// while it waits, and answers done soon after the node changed (a watch event, not
// a poll that re-reads everything every 250 ms).
func TestLingerWaitsOnTheWatch(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	f.node("cache-w3", "v1.35.0", false)
	m := f.machine("m-cache-w3", "cache-w3", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	callUntil(t, f.coordinator(), req, "pick up plan", 5)
	hash := f.getNode("cache-w3").Annotations[inplacev1.DesiredPlanAnnotation]
	f.agentReports("cache-w3", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseApplying, Step: 1, Steps: 2}, false)

	n := &requests{}
	scripted := f.cachedCoordinator(n)
	steady(t, scripted, n, req)
	opts := scripted.opts
	opts.Linger = 4 * time.Second
	lingering, err := New(opts)
	g.Expect(err).NotTo(HaveOccurred())

	done := make(chan time.Time, 1)
	quiet := make(chan int64, 1)
	go func() {
		time.Sleep(1200 * time.Millisecond)
		quiet <- n.n.Load()
		f.agentReports("cache-w3", protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 2, Steps: 2}, true)
		f.setKubelet("cache-w3", "v1.36.0")
		done <- time.Now()
	}()
	before := n.n.Load()
	resp := call(lingering, req)
	answered := time.Now()
	g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
	g.Expect(resp.Message).To(Equal("node cache-w3 runs plan " + hash[:12]))
	g.Expect(<-quiet-before).To(BeZero(), "requests while the call waited for the node")
	g.Expect(answered.Sub(<-done)).To(BeNumerically("<", time.Second))
	g.Expect(f.getNode("cache-w3").Spec.Unschedulable).To(BeFalse())
}

// TestSecretCache: a body is read once per resourceVersion, a change is read again,
// a deleted Secret is gone, and at most the bound's bytes are held (here two bodies).
func TestSecretCache(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	n := &requests{}
	cfg := n.wrap(testEnv.Require(t))
	live, err := client.New(cfg, client.Options{Scheme: f.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	informers, err := cache.New(testEnv.Require(t), cache.Options{Scheme: f.scheme})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = informers.Start(ctx) }()
	sc := NewSecretCache(SyncedReader{Cache: informers}, live, 2*secretbudget.OverheadBytes+8)

	for _, name := range []string{"a", "b", "c"} {
		g.Expect(f.mgmt.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}, Data: map[string][]byte{"k": []byte(name)}})).To(Succeed())
	}
	read := func(name string) (string, error) {
		s := &corev1.Secret{}
		err := sc.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, s)
		return string(s.Data["k"]), err
	}
	// Once the metadata informer synced, a second read makes no request.
	g.Eventually(func() int64 {
		before := n.n.Load()
		v, err := read("a")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(v).To(Equal("a"))
		return n.n.Load() - before
	}).WithTimeout(10 * time.Second).Should(BeZero())

	s := &corev1.Secret{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "a"}, s)).To(Succeed())
	s.Data["k"] = []byte("a2")
	g.Expect(f.mgmt.Update(f.ctx, s)).To(Succeed())
	g.Eventually(func() string { v, _ := read("a"); return v }).WithTimeout(5 * time.Second).Should(Equal("a2"))

	for _, name := range []string{"b", "c"} {
		v, err := read(name)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(v).To(Equal(name))
	}
	g.Expect(sc.Len()).To(Equal(2))
	g.Expect(sc.Bytes()).To(BeNumerically("<=", 2*secretbudget.OverheadBytes+8))

	g.Expect(f.mgmt.Delete(f.ctx, s)).To(Succeed())
	g.Eventually(func() bool { _, err := read("a"); return apierrors.IsNotFound(err) }).WithTimeout(5 * time.Second).Should(BeTrue())
}

// TestWorkloadCachesAreBounded: idle clusters and clusters beyond Max are dropped.
func TestWorkloadCachesAreBounded(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	now := time.Now()
	w := NewInformerWorkloadCaches(f.scheme, WorkloadCacheOptions{Max: 2, Idle: time.Minute, Now: func() time.Time { return now }})
	defer w.Stop()
	// Each cluster its own endpoint (credentials); one more sharing c1's.
	at := func(name string) *WorkloadCluster {
		cfg := rest.CopyConfig(f.wc.Config)
		cfg.BearerToken = name
		return &WorkloadCluster{Client: f.wc.Client, Clientset: f.wc.Clientset, Config: cfg}
	}
	for _, name := range []string{"c1", "c2", "c3"} {
		w.For(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, at(name), "")
		now = now.Add(time.Second)
	}
	g.Expect(w.Len()).To(Equal(2))
	w.For(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c1-twin"}, at("c3"), "")
	g.Expect(w.Len()).To(Equal(2), "clusters at one endpoint share their watches")
	now = now.Add(2 * time.Minute)
	w.For(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c4"}, at("c4"), "")
	g.Expect(w.Len()).To(Equal(1))
	w.Forget(client.ObjectKey{Namespace: f.ns, Name: "c4"})
	g.Expect(w.Len()).To(BeZero())
	// Until its watches synced, a cluster's caches are not served.
	_, _, ok := w.For(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c5"}, f.wc, "")
	g.Expect(ok).To(BeFalse())
}

// TestWorkloadCachesServeNodesWithoutDaemonSets: a workload API server that does not
// serve DaemonSets to us (Cluster API's in-memory one has no apps group; a cluster
// may deny the list) still gets its Nodes and plan Secrets served from the caches,
// and a DaemonSet read answers errNotSynced (the call reads live) instead of waiting
// for a sync that never comes. Before, the one unsynced informer kept every call of
// such a cluster on live reads and the linger on its 250 ms poll.
func TestWorkloadCachesServeNodesWithoutDaemonSets(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := rest.CopyConfig(f.wc.Config)
	cfg.BearerToken = "no-daemonsets" // an endpoint of its own
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, "/daemonsets") {
				return &http.Response{StatusCode: http.StatusInternalServerError, Body: io.NopCloser(strings.NewReader("unknown")),
					Header: http.Header{}, Request: r}, nil
			}
			return rt.RoundTrip(r)
		})
	})
	wc := &WorkloadCluster{Client: f.wc.Client, Clientset: f.wc.Clientset, Config: cfg}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-node"}}
	g.Expect(f.wl.Create(f.ctx, node)).To(Succeed())
	t.Cleanup(func() { _ = f.wl.Delete(context.Background(), node) })

	w := NewInformerWorkloadCaches(f.scheme, WorkloadCacheOptions{})
	defer w.Stop()
	key := client.ObjectKey{Namespace: f.ns, Name: "c"}
	var cached *WorkloadCluster
	g.Eventually(func() bool {
		var ok bool
		cached, _, ok = w.For(f.ctx, key, wc, "")
		return ok
	}).WithTimeout(10*time.Second).Should(BeTrue(), "Nodes and plan Secrets are served although DaemonSets never sync")
	g.Expect(cached.Client.Get(f.ctx, client.ObjectKeyFromObject(node), &corev1.Node{})).To(Succeed())
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Second)
	defer cancel()
	err := cached.Client.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: "capi-inplace-agent"}, &appsv1.DaemonSet{})
	g.Expect(err).To(MatchError(errNotSynced), "a DaemonSet read does not wait for its informer")
}

// TestNodeChangesArePerNode: a call waiting on its Node is woken by that Node's
// events only, not by other Nodes' (ten agents writing their Nodes at once would
// otherwise wake every waiting call at every write).
func TestNodeChangesArePerNode(t *testing.T) {
	e := &workloadCache{changed: map[string]chan struct{}{}}
	a, b := e.changes("a"), e.changes("b")
	if e.changes("a") != a {
		t.Fatal("two waits on one Node got different channels")
	}
	e.notify("b")
	e.notify("c") // nobody waits on c
	select {
	case <-a:
		t.Fatal("node a's channel closed by an event of node b")
	default:
	}
	select {
	case <-b:
	default:
		t.Fatal("node b's channel not closed by its event")
	}
	e.notify("a")
	select {
	case <-a:
	default:
		t.Fatal("node a's channel not closed by its event")
	}
	if len(e.changed) != 0 {
		t.Fatalf("closed channels kept: %v", e.changed)
	}
	if e.changes("a") == a {
		t.Fatal("a closed channel handed out again")
	}
}

// TestLingerReusesItsLiveRead: a lingering call that started the update (a live
// check: cordon, publish) and then sees the agent finish checks the finish live
// with the management objects it read at its start, as long as the caches show
// them unchanged in what a call decides on: one Machine read for the whole call.
// Cluster API's own conditions on the Machine and the Cluster (it rewrites them as
// the update goes) are not decided on: still one read. When another writer changes
// the Machine's metadata meanwhile, the finish reads it again.
func TestLingerReusesItsLiveRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(f *fixture, m *clusterv1.Machine)
		reads int64
		// kept is a condition of another writer that must survive the call's own.
		kept string
	}{
		{name: "unchanged", reads: 1},
		{name: "upstream-conditions", reads: 1, kept: "UpstreamProgress", write: func(f *fixture, m *clusterv1.Machine) {
			f.upstreamCondition(m)
			f.upstreamCondition(&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c1"}})
		}},
		{name: "annotated", reads: 2, write: func(f *fixture, m *clusterv1.Machine) {
			f.annotate(m, "example.com/other-writer", "1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			node := "reuse-" + tc.name
			f.node(node, "v1.35.0", false)
			m := f.machine("m-"+node, node, "v1.36.0", false)
			req := f.request(m, &bootstrapv1.KubeadmConfig{})
			n := &requests{}
			c := f.cachedCoordinator(n, func(o *Options) { o.Linger = 5 * time.Second })
			// Warm the management and workload caches without starting the update
			// (a cached view never writes: it answers needsLive).
			g.Eventually(func() bool {
				_, _, seen, _ := c.fromCaches(f.ctx, req)
				return seen != nil
			}).WithTimeout(10 * time.Second).Should(BeTrue())
			g.Eventually(func() bool {
				_, _, ok := c.opts.Caches.Workloads.For(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c1"}, f.wc, node)
				return ok
			}).WithTimeout(10 * time.Second).Should(BeTrue())
			g.Expect(f.getNode(node).Spec.Unschedulable).To(BeFalse(), "not started by the warm-up")

			go func() {
				var hash string
				for hash == "" {
					time.Sleep(20 * time.Millisecond)
					hash = f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
				}
				if tc.write != nil {
					tc.write(f, m)
					time.Sleep(300 * time.Millisecond) // the caches see it
				}
				f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseCommitted, Step: 1, Steps: 1}, true)
				f.setKubelet(node, "v1.36.0")
			}()
			before := n.machineGets.Load()
			resp := &runtimehooksv1.UpdateMachineResponse{}
			c.UpdateMachine(f.ctx, req, resp)
			g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess))
			g.Expect(resp.RetryAfterSeconds).To(BeZero(), resp.Message)
			g.Expect(f.getNode(node).Spec.Unschedulable).To(BeFalse(), "uncordoned at the finish")
			g.Expect(n.machineGets.Load()-before).To(Equal(tc.reads), "live Machine reads before the answer")
			// The Succeeded condition lands on the Machine after the answer, also
			// when the call's reused copy is older than the server's.
			g.Expect(c.WaitForReports(f.ctx)).To(Succeed())
			stored := &clusterv1.Machine{}
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
			cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Reason).To(Equal(inplacev1.ReasonSucceeded))
			if tc.kept != "" {
				g.Expect(meta.FindStatusCondition(stored.Status.Conditions, tc.kept)).NotTo(BeNil(), "Cluster API's condition kept")
			}
		})
	}
}

// TestDrainAsksTheNodeCacheFirst: whether the node is its cluster's only one (no
// eviction then) is answered without a request when the workload's Node cache holds
// another Node, and live when it holds only this one: a single-node cluster's pods
// stay, as without caches.
func TestDrainAsksTheNodeCacheFirst(t *testing.T) {
	for _, single := range []bool{false, true} {
		name := map[bool]string{false: "other-nodes", true: "single-node"}[single]
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			n := &requests{}
			var workload *rest.Config
			if single {
				workload = n.wrap(dedicatedWorkload(t))
			}
			f := newFixture(t, workload)
			node := "drain-" + name
			f.node(node, "v1.35.0", false)
			if !single {
				f.node(node+"-peer", "v1.35.0", false)
			}
			f.pod("db-0", node, map[string]string{"app": "db"}, controllerRef("StatefulSet", "db", "66666666-6666-6666-6666-666666666666"), nil)
			m := f.machine("m-"+node, node, "v1.36.0", false)
			req := f.request(m, nil)
			c := f.cachedCoordinator(n, func(o *Options) {
				if single {
					o.Clusters = StaticClusters{Cluster: f.wc}
				}
			})
			key := client.ObjectKey{Namespace: f.ns, Name: "c1"}
			g.Eventually(func() bool {
				_, _, ok := c.opts.Caches.Workloads.For(f.ctx, key, f.wc, node)
				return ok
			}).WithTimeout(10 * time.Second).Should(BeTrue())
			if !single {
				g.Eventually(func() int {
					cached, _, _ := c.opts.Caches.Workloads.For(f.ctx, key, f.wc, node)
					nodes := &corev1.NodeList{}
					g.Expect(cached.Client.List(f.ctx, nodes)).To(Succeed())
					return len(nodes.Items)
				}).WithTimeout(10 * time.Second).Should(BeNumerically(">", 1))
			}

			before := n.nodeLists.Load()
			resp := call(c, req)
			g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
			g.Expect(f.getNode(node).Spec.Unschedulable).To(BeTrue(), "cordoned")
			if single {
				g.Expect(n.nodeLists.Load()-before).To(Equal(int64(1)), "live Node lists")
				g.Expect(f.podExists("db-0")).To(BeTrue(), "a single node's pods stay")
				g.Expect(resp.Message).To(ContainSubstring("pick up plan"))
			} else {
				g.Expect(n.nodeLists.Load()-before).To(BeZero(), "live Node lists")
				g.Eventually(func() bool { return f.podExists("db-0") }).WithTimeout(10*time.Second).Should(BeFalse(), "evicted")
			}
		})
	}
}

// upstreamCondition writes a condition of Cluster API's own (type UpstreamProgress)
// on the status of obj (a Machine or a Cluster, read again first), as its
// controllers do while an update goes. It reports with Errorf: tests call it from
// a goroutine of their own.
func (f *fixture) upstreamCondition(obj client.Object) {
	f.t.Helper()
	if err := f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		f.t.Errorf("read %s: %v", obj.GetName(), err)
		return
	}
	before := obj.DeepCopyObject().(client.Object)
	cond := metav1.Condition{Type: "UpstreamProgress", Status: metav1.ConditionTrue, Reason: "Progressing", LastTransitionTime: metav1.Now()}
	switch o := obj.(type) {
	case *clusterv1.Machine:
		meta.SetStatusCondition(&o.Status.Conditions, cond)
	case *clusterv1.Cluster:
		meta.SetStatusCondition(&o.Status.Conditions, cond)
	}
	if err := f.mgmt.Status().Patch(f.ctx, obj, client.MergeFrom(before)); err != nil {
		f.t.Errorf("write a condition on %s: %v", obj.GetName(), err)
	}
}

// TestReadAheadUsesOnlyTheStoredReferences: the references read alongside the
// Machine come from a hint (the informer's copy), and are used only when the
// Machine as read names the same objects: a hint naming another bootstrap config,
// infrastructure machine and Cluster (a cache behind a change of references) yields
// exactly what a read without a hint yields.
func TestReadAheadUsesOnlyTheStoredReferences(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	m := f.machine("m-ahead", "ahead", "v1.36.0", false)
	other := f.machine("m-ahead-other", "ahead-other", "v1.36.0", false)
	req := f.request(m, &bootstrapv1.KubeadmConfig{})
	c := f.coordinator()

	plain, out, ok := c.readStored(f.ctx, req)
	g.Expect(ok).To(BeTrue(), out.Message)
	stored := &clusterv1.Machine{}
	g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())

	wrong := stored.DeepCopy()
	wrong.Spec.Bootstrap.ConfigRef.Name = other.Spec.Bootstrap.ConfigRef.Name
	wrong.Spec.InfrastructureRef.Name = other.Spec.InfrastructureRef.Name
	wrong.Spec.ClusterName = "another-cluster"
	for name, hint := range map[string]*clusterv1.Machine{"same": stored, "other references": wrong} {
		d, out, ok := c.readStoredHinted(f.ctx, req, hint)
		g.Expect(ok).To(BeTrue(), name+": "+out.Message)
		g.Expect(d.bootstrap.GetName()).To(Equal(plain.bootstrap.GetName()), name)
		g.Expect(d.bootstrap.GetName()).To(Equal(m.Name), name)
		g.Expect(d.infra.GetName()).To(Equal(m.Name), name)
		g.Expect(d.cluster.err).NotTo(HaveOccurred(), name)
		g.Expect(d.cluster.cluster.Name).To(Equal("c1"), name)
	}
}
