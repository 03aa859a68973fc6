package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/workload"
)

// NewHandlers wires the hook handlers exactly as `capi-inplace extension` does
// (built-in policy, coordinator behind UpdateMachine, no agent installation), with
// one difference when unthrottled: the management and workload clients have no
// client-side rate limit (QPS -1). The binary's workload clients, built from
// kubeconfig Secrets, keep client-go's default of 5 QPS per cluster.
func NewHandlers(cfg *rest.Config, scheme *runtime.Scheme, unthrottled bool) (*extension.Handlers, error) {
	cfg = rest.CopyConfig(cfg)
	if unthrottled {
		cfg.QPS, cfg.Burst = -1, 0
	}
	mgmt, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("management client: %w", err)
	}
	var clusters coordinator.WorkloadClusters
	if unthrottled {
		clusters = &unthrottledClusters{mgmt: mgmt, scheme: scheme, cache: map[client.ObjectKey]*coordinator.WorkloadCluster{}}
	} else if clusters, err = coordinator.NewKubeconfigClusters(mgmt, scheme, 4*time.Second); err != nil {
		return nil, err
	}
	pol := policy.Builtin()
	coord, err := coordinator.New(coordinator.Options{
		Client: mgmt, Clusters: clusters, Recorder: nopRecorder{},
		OSImages: coordinator.OSImagesFromPolicy(pol), Drain: coordinator.DrainOptionsFromPolicy(pol.Drain()),
	})
	if err != nil {
		return nil, err
	}
	metrics, err := extension.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	return extension.NewHandlers(extension.Options{Policy: pol, Updater: coord, Metrics: metrics})
}

type nopRecorder struct{}

func (nopRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...interface{}) {
}

// unthrottledClusters is coordinator.KubeconfigClusters without client-side rate
// limiting: the same kubeconfig Secret, one cached client per cluster.
type unthrottledClusters struct {
	mgmt   client.Reader
	scheme *runtime.Scheme
	mu     sync.Mutex
	cache  map[client.ObjectKey]*coordinator.WorkloadCluster
}

func (u *unthrottledClusters) Get(ctx context.Context, key client.ObjectKey) (*coordinator.WorkloadCluster, error) {
	// Read the Secret every call, as KubeconfigClusters does (rotation check).
	data, err := workload.Kubeconfig(ctx, u.mgmt, key)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if wc, ok := u.cache[key]; ok {
		return wc, nil
	}
	cfg, err := workload.RESTConfig(data, key, workload.Options{Unthrottled: true})
	if err != nil {
		return nil, err
	}
	wc, err := coordinator.NewWorkloadCluster(cfg, u.scheme, 4*time.Second)
	if err != nil {
		return nil, err
	}
	u.cache[key] = wc
	return wc, nil
}

func (u *unthrottledClusters) Invalidate(key client.ObjectKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.cache, key)
}

// StartInProcess serves h over HTTPS on 127.0.0.1 in this process, until ctx ends.
// Its Server has no process of its own: no memory, CPU or allocation figures.
func StartInProcess(ctx context.Context, name string, h *extension.Handlers, dir string) (*Server, error) {
	certDir := filepath.Join(dir, "inprocess-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	ca, err := extensiontest.WriteSelfSignedCert(certDir)
	if err != nil {
		return nil, err
	}
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	srv, err := extension.NewServer(h, extension.ServerOptions{Host: "127.0.0.1", Port: port, CertDir: certDir})
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Start(ctx) }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for tlsDial(addr) != nil {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("in-process hook server: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("in-process hook server did not serve on %s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	hc, err := NewHookClient(addr, ca)
	if err != nil {
		return nil, err
	}
	return &Server{Name: name, Client: hc}, nil
}
