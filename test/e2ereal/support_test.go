//go:build e2ereal

package e2ereal

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/internal/status"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// workloadRef is the scenarios' workload image (hack/realcapi/images.sh builds it, the
// suite pushes it to the lane's registry); it serves HTTP on workloadPort, a host port.
const (
	workloadRef  = "capi-inplace.local/e2e-httpserve:v1"
	workloadPort = 18080
	dockerCLI    = "/usr/bin/docker"
)

// registerWebhooks registers our extension's admission webhooks with the management
// API server for the lane's namespaces, as the release's webhook configurations do:
// the single-node hold webhook and the guard.
func registerWebhooks(ctx context.Context, stack *localstack.Stack, ext *localstack.Extension) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ext.Cert.CAPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := func(path string) (string, error) {
		u := fmt.Sprintf("https://127.0.0.1:%d%s", ext.Port, path)
		resp, err := hc.Post(u, "application/json", bytes.NewReader([]byte(`{}`)))
		if err != nil {
			return "", fmt.Errorf("probe %s: %w", u, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return "", fmt.Errorf("the extension does not serve %s", path)
		}
		return u, nil
	}
	lane := &metav1.LabelSelector{MatchLabels: map[string]string{extensionLabel: "true"}}
	holdURL, err := url(singlenode.DefaultWebhookPath)
	if err != nil {
		return err
	}
	hold := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &holdURL, CABundle: ext.Cert.CAPEM})
	hold.NamespaceSelector = lane
	guardURL, err := url(guard.WebhookPath)
	if err != nil {
		return err
	}
	guardHook := guard.ValidatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &guardURL, CABundle: ext.Cert.CAPEM})
	guardHook.NamespaceSelector = lane
	for _, cfg := range []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{hold},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-guard"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{guardHook},
		},
	} {
		if err := stack.Client.Create(ctx, cfg); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T: %w", cfg, err)
		}
	}
	return nil
}

// nodeExec runs a command in a node container.
func nodeExec(ctx context.Context, node string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, dockerCLI, append([]string{"exec", node}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker exec %s %s: %w: %s", node, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func mustNodeExec(t *testing.T, node string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := nodeExec(ctx, node, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeLogTimeout bounds each command saveNodeLogs runs: a wedged node must not hold
// up the scenario's end.
const nodeLogTimeout = 30 * time.Second

// saveNodeLogs copies, from every node container of cluster, what dates the steps
// of an update on the node, to <run dir>/nodes/<cluster>/<node>/: the kubelet's and
// containerd's journal (static pods stopped and started), the journal's tail, the
// agent's container logs (its DaemonSet pod and its rescue static pod, every
// restart the kubelet kept) and the static pod manifests and kubeadm's backup
// directories with their mtimes (kubeadm writes each component's manifest in turn
// and names its backups by the time it started). The nodes go with the lane's
// Docker engine after the run, so this is the only copy. Best effort: a failure is
// logged, never fails the scenario.
func saveNodeLogs(t *testing.T, cluster string) {
	ctx, cancel := context.WithTimeout(suite.ctx, nodeLogTimeout)
	// CAPD labels each container with its cluster and role (kind's labels).
	out, err := exec.CommandContext(ctx, dockerCLI, "ps", "--filter", "label=io.x-k8s.kind.cluster="+cluster,
		"--format", `{{.Names}} {{.Label "io.x-k8s.kind.role"}}`).Output()
	cancel()
	if err != nil {
		t.Logf("node logs of cluster %s: docker ps: %v", cluster, err)
		return
	}
	journal := func(args ...string) []string {
		return append([]string{"journalctl", "--no-pager", "-o", "short-iso-precise"}, args...)
	}
	agentLogs := fmt.Sprintf("/var/log/pods/%s_%s-*/*/*.log /var/log/pods/kube-system_capi-inplace-rescue-*/*/*.log",
		inplacev1.AgentNamespace, agentinstall.AgentName)
	files := []struct {
		name string
		cmd  []string
	}{
		{"kubelet.log", journal("-u", "kubelet")},
		{"containerd.log", journal("-u", "containerd")},
		{"journal.log", journal("-n", "5000")},
		{"agent.log", []string{"sh", "-c", `for f in ` + agentLogs + `; do if [ -f "$f" ]; then echo "==> $f"; cat "$f"; fi; done`}},
		// /etc/kubernetes/tmp holds kubeadm's backups, named by their time; a node
		// kubeadm never upgraded has none.
		{"manifests.txt", []string{"sh", "-c", `ls -l --time-style=full-iso /etc/kubernetes/manifests; if [ -d /etc/kubernetes/tmp ]; then ls -l --time-style=full-iso /etc/kubernetes/tmp; fi`}},
	}
	root := filepath.Join(suite.artifacts, "nodes", cluster)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		node, role, _ := strings.Cut(line, " ")
		if node == "" || role == "external-load-balancer" {
			continue
		}
		dir := filepath.Join(root, node)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("node logs: %v", err)
			return
		}
		for _, f := range files {
			ctx, cancel := context.WithTimeout(suite.ctx, nodeLogTimeout)
			// What a failing command printed before it failed is kept too.
			text, err := nodeExec(ctx, node, f.cmd...)
			cancel()
			if err != nil {
				t.Logf("node logs of %s: %v", node, err)
			}
			if werr := os.WriteFile(filepath.Join(dir, f.name), []byte(text), 0o644); werr != nil {
				t.Logf("node logs of %s: %v", node, werr)
			}
		}
	}
	t.Logf("node logs of cluster %s in %s", cluster, root)
}

// nodeIP is a node container's address on the kind network.
func nodeIP(ctx context.Context, node string) (string, error) {
	out, err := exec.CommandContext(ctx, dockerCLI, "inspect", "-f", "{{(index .NetworkSettings.Networks \"kind\").IPAddress}}", node).Output()
	if err != nil {
		return "", fmt.Errorf("docker inspect %s: %w", node, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// workloadClient is a client of a workload cluster, from its kubeconfig Secret.
func workloadClient(ctx context.Context, ns, cluster string) (kubernetes.Interface, error) {
	kc, err := suite.stack.WorkloadKubeconfig(ctx, ns, cluster)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// failed keeps every failed assertion of the run; TestMain repeats them last.
var failed = &lanekit.Failures{Lane: "e2ereal", Dir: "/test/e2ereal/"}

// newG is NewWithT(t) with the lane's waits, whose failures are also kept for
// the run's summary.
func newG(t *testing.T) *WithT {
	g := failed.G(t)
	g.SetDefaultEventuallyTimeout(15 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(2 * time.Second)
	return g
}

// statusOf runs `capi-inplace status -o json`, as an operator would, on a Cluster
// and returns its view; wantExit is the exit code expected (3: a node's plan failed).
func statusOf(t *testing.T, ns, cluster string, wantExit int) status.ClusterView {
	t.Helper()
	ctx, cancel := context.WithTimeout(suite.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(suite.root, "bin", "capi-inplace"), "status", cluster, "-n", ns, "-o", "json", "--kubeconfig", suite.stack.KubeconfigPath)
	out, err := cmd.Output()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("capi-inplace status: %v", err)
	}
	if code != wantExit {
		t.Fatalf("capi-inplace status exited %d, want %d: %v\n%s", code, wantExit, err, out)
	}
	var r status.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("capi-inplace status output: %v\n%s", err, out)
	}
	for _, c := range r.Clusters {
		if c.Name == cluster {
			return c
		}
	}
	t.Fatalf("capi-inplace status shows no cluster %s:\n%s", cluster, out)
	return status.ClusterView{}
}
