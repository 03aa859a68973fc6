package workload

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Options say who talks to a workload cluster and how.
type Options struct {
	// UserAgent names the caller in the workload API server's logs.
	UserAgent string
	// Timeout bounds each request; zero leaves the config's own.
	Timeout time.Duration
	// Unthrottled turns client-side rate limiting off (the bench's in-process server).
	Unthrottled bool
}

// Default client-side rate limit: client-go's default of 5 requests/s per cluster
// throttled UpdateMachine to a few calls a second under load (measured in bench/);
// Cluster API's own workload clients allow far more.
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// Kubeconfig returns the admin kubeconfig Cluster API keeps for cluster: the Secret
// "<cluster>-kubeconfig" (key "value") beside the Cluster.
func Kubeconfig(ctx context.Context, mgmt client.Reader, cluster client.ObjectKey) ([]byte, error) {
	data, err := kubeconfig.FromSecret(ctx, mgmt, cluster)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig of cluster %s: %w", cluster, err)
	}
	return data, nil
}

// RESTConfig parses the kubeconfig of cluster (from Kubeconfig) into a rest config
// set up by Configure.
func RESTConfig(data []byte, cluster client.ObjectKey, o Options) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig of cluster %s: %w", cluster, err)
	}
	return Configure(cfg, o), nil
}

// Configure returns a copy of cfg with the user agent, the request timeout and the
// client-side rate limit of o (DefaultQPS and DefaultBurst unless cfg sets its own
// or o is unthrottled).
func Configure(cfg *rest.Config, o Options) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	if o.Timeout > 0 {
		cfg.Timeout = o.Timeout
	}
	switch {
	case o.Unthrottled:
		cfg.QPS, cfg.Burst = -1, 0
	case cfg.QPS == 0:
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	}
	return cfg
}
