package coordinator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/workload"
)

// WorkloadCluster holds the clients of one workload cluster: a controller-runtime
// client for objects and a clientset for the drain library.
type WorkloadCluster struct {
	Client    client.Client
	Clientset kubernetes.Interface
	// Config is the rest config both were built from (InformerWorkloadCaches
	// watches with it); nil when unknown.
	Config *rest.Config
}

// WorkloadClusters hands out clients of workload clusters by their CAPI Cluster key.
type WorkloadClusters interface {
	Get(ctx context.Context, cluster client.ObjectKey) (*WorkloadCluster, error)
	// Invalidate drops a cached client, e.g. after the cluster did not answer.
	Invalidate(cluster client.ObjectKey)
}

// KubeconfigClusters builds workload-cluster clients from CAPI's
// `<cluster>-kubeconfig` Secret and caches them per cluster. A cached client is reused
// while the Secret's kubeconfig is unchanged (rotated credentials rebuild it) and
// until Invalidate drops it. Its clients read directly; steady-state calls read
// through InformerWorkloadCaches instead (caches.go). Given a SecretCache as its
// reader, the kubeconfig itself is read again only when its Secret's
// resourceVersion changes.
type KubeconfigClusters struct {
	mgmt    client.Reader
	scheme  *runtime.Scheme
	timeout time.Duration

	mu    sync.Mutex
	cache map[client.ObjectKey]cachedCluster
}

type cachedCluster struct {
	kubeconfigHash [32]byte
	cluster        *WorkloadCluster
}

// NewKubeconfigClusters returns a KubeconfigClusters reading kubeconfig Secrets
// through mgmt. scheme must know the core Kubernetes types; timeout bounds every
// request to a workload cluster (keep it well below CAPI's 10 s hook timeout).
func NewKubeconfigClusters(mgmt client.Reader, scheme *runtime.Scheme, timeout time.Duration) (*KubeconfigClusters, error) {
	if mgmt == nil || scheme == nil {
		return nil, fmt.Errorf("kubeconfig clusters: management reader and scheme are required")
	}
	if timeout <= 0 {
		timeout = 4 * time.Second
	}
	return &KubeconfigClusters{mgmt: mgmt, scheme: scheme, timeout: timeout, cache: map[client.ObjectKey]cachedCluster{}}, nil
}

// Get implements WorkloadClusters.
func (k *KubeconfigClusters) Get(ctx context.Context, cluster client.ObjectKey) (*WorkloadCluster, error) {
	data, err := workload.Kubeconfig(ctx, k.mgmt, cluster)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	k.mu.Lock()
	defer k.mu.Unlock()
	if c, ok := k.cache[cluster]; ok && c.kubeconfigHash == sum {
		return c.cluster, nil
	}
	cfg, err := workload.RESTConfig(data, cluster, workload.Options{})
	if err != nil {
		return nil, err
	}
	wc, err := NewWorkloadCluster(cfg, k.scheme, k.timeout)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	k.cache[cluster] = cachedCluster{kubeconfigHash: sum, cluster: wc}
	return wc, nil
}

// Invalidate implements WorkloadClusters.
func (k *KubeconfigClusters) Invalidate(cluster client.ObjectKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.cache, cluster)
}

// NewWorkloadCluster builds the clients of one cluster from a rest config.
func NewWorkloadCluster(cfg *rest.Config, scheme *runtime.Scheme, timeout time.Duration) (*WorkloadCluster, error) {
	cfg = workload.Configure(cfg, workload.Options{UserAgent: "capi-inplace-coordinator", Timeout: timeout})
	// One HTTP client (one connection pool) for both clients.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build workload HTTP client: %w", err)
	}
	mapper, err := workloadRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("build workload client: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("build workload clientset: %w", err)
	}
	return &WorkloadCluster{Client: c, Clientset: cs, Config: cfg}, nil
}

// StaticClusters serves one WorkloadCluster for every cluster key: for tests, and for
// a management cluster that is its own workload cluster.
type StaticClusters struct{ Cluster *WorkloadCluster }

// Get implements WorkloadClusters.
func (s StaticClusters) Get(context.Context, client.ObjectKey) (*WorkloadCluster, error) {
	if s.Cluster == nil {
		return nil, fmt.Errorf("no workload cluster configured")
	}
	return s.Cluster, nil
}

// Invalidate implements WorkloadClusters.
func (StaticClusters) Invalidate(client.ObjectKey) {}
