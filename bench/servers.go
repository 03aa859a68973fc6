package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// Server is a runtime extension process under load.
type Server struct {
	Name       string
	Proc       *localstack.Process
	Client     *HookClient
	MetricsURL string // plain HTTP /metrics (Go runtime counters)
}

// ServerSpec says how to start an extension binary on a port with a cert dir and a
// plain-HTTP metrics address.
type ServerSpec struct {
	Name string
	Path string
	Args func(port int, certDir, metricsAddr string) []string
	Env  []string
}

// OurExtension is `capi-inplace extension` without agent installation (the load has
// no agents to install), with metrics on metricsAddr. The kubeconfig comes from
// $KUBECONFIG, not --kubeconfig: that is controller-runtime's config loading, as
// in a pod (in-cluster config), which turns client-side rate limiting off; with
// --kubeconfig the management client would keep client-go's 5 QPS default.
func OurExtension(binDir, kubeconfig string, extraArgs ...string) ServerSpec {
	return ServerSpec{
		Name: "capi-inplace",
		Path: filepath.Join(binDir, "capi-inplace"),
		Args: func(port int, certDir, metricsAddr string) []string {
			return append([]string{"extension", "--webhook-port=" + strconv.Itoa(port), "--webhook-host=127.0.0.1",
				"--webhook-cert-dir=" + certDir, "--manage-agents=false",
				"--health-addr=127.0.0.1:0", "--diagnostics-address=" + metricsAddr, "--insecure-diagnostics"}, extraArgs...)
		},
		Env: []string{"KUBECONFIG=" + kubeconfig},
	}
}

// UpstreamTestExtension is Cluster API's test extension
// (sigs.k8s.io/cluster-api/test/extension, built by make tools-capi) with the flags
// of its main.go; it needs a kubeconfig only to start its manager.
func UpstreamTestExtension(binDir, kubeconfig string) ServerSpec {
	return ServerSpec{
		Name: "upstream-test-extension",
		Path: filepath.Join(binDir, "capi-test-extension"),
		Args: func(port int, certDir, metricsAddr string) []string {
			return []string{"--leader-elect=false", "--webhook-port=" + strconv.Itoa(port), "--webhook-cert-dir=" + certDir,
				"--health-addr=127.0.0.1:0", "--diagnostics-address=" + metricsAddr, "--insecure-diagnostics"}
		},
		Env: []string{"KUBECONFIG=" + kubeconfig},
	}
}

// StartServer starts spec with a fresh self-signed certificate under dir and waits
// until it serves HTTPS and metrics.
func StartServer(ctx context.Context, spec ServerSpec, dir, logDir string) (*Server, error) {
	certDir := filepath.Join(dir, spec.Name+"-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	ca, err := extensiontest.WriteSelfSignedCert(certDir)
	if err != nil {
		return nil, fmt.Errorf("%s certificate: %w", spec.Name, err)
	}
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	mport, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", mport)
	p, err := localstack.StartProcess(localstack.ProcessSpec{
		Name: spec.Name, Path: spec.Path, Args: spec.Args(port, certDir, metricsAddr), Env: spec.Env, LogDir: logDir,
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &Server{Name: spec.Name, Proc: p, MetricsURL: "http://" + metricsAddr + "/metrics"}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx, "serving HTTPS on "+addr, func(ctx context.Context) error {
		if err := tlsDial(addr); err != nil {
			return err
		}
		_, err := ScrapeSum(ctx, s.MetricsURL, "go_memstats_mallocs_total")
		return err
	}); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	if s.Client, err = NewHookClient(addr, ca); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return s, nil
}

// Stop ends the process (TERM, then KILL).
func (s *Server) Stop() { s.Proc.Stop(10 * time.Second) }

func tlsDial(addr string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
	if err != nil {
		return err
	}
	return c.Close()
}
