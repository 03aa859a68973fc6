package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// Env is a management cluster for the benchmarks: envtest's kube-apiserver and etcd
// with Cluster API's CRDs (core, kubeadm bootstrap and control plane, Dev provider)
// from bin/capi-config, and an admin kubeconfig file. The same API server plays
// the workload clusters (their Nodes and plan Secrets).
type Env struct {
	Config     *rest.Config
	Kubeconfig string // path of the admin kubeconfig
	// KubeconfigData is the same kubeconfig, for <cluster>-kubeconfig Secrets.
	KubeconfigData []byte
	Scheme         *runtime.Scheme
	env            *testenv.Env
}

// StartEnv starts the API server (binaries from binDir) with the CRDs under
// binDir/capi-config and writes the kubeconfig into dir.
func StartEnv(binDir, dir string) (*Env, error) {
	var crds []string
	for _, p := range []string{"core", "bootstrap", "kcp", "dev"} {
		crds = append(crds, filepath.Join(binDir, "capi-config", p, "crd"))
	}
	return StartEnvWithCRDs(binDir, crds, dir)
}

// StartEnvWithCRDs is StartEnv with the CRD directories given.
func StartEnvWithCRDs(binDir string, crds []string, dir string) (*Env, error) {
	env, err := testenv.Start(testenv.Options{BinaryAssetsDirectory: binDir, CRDDirs: crds})
	if err != nil {
		return nil, fmt.Errorf("start envtest with binaries and CRDs from %s (make tools-capi builds them): %w", binDir, err)
	}
	// The driver creates hundreds of objects: no client-side throttling.
	e := &Env{env: env}
	cfg := env.Config
	cfg.QPS, cfg.Burst = 1000, 2000
	e.Config = cfg
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if e.KubeconfigData, err = clientcmd.Write(*kc); err != nil {
		e.Stop()
		return nil, fmt.Errorf("encode kubeconfig: %w", err)
	}
	e.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, e.KubeconfigData, 0o600); err != nil {
		e.Stop()
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	e.Scheme = runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(e.Scheme); err != nil {
			e.Stop()
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return e, nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() {
	_ = e.env.Stop()
}
