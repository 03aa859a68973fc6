//go:build e2enode

package e2enode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Lane runs hack/realnode/node.sh.
type Lane struct {
	Root  string // repository root
	Cache string // hack/realnode/build.sh's output
	State string // node state and logs
}

// Node is one real node of the lane.
type Node struct {
	Name, IP, PodCIDR string
}

func (l *Lane) script() string { return filepath.Join(l.Root, "hack", "realnode", "node.sh") }

func (l *Lane) env() []string {
	return append(os.Environ(), "REALNODE_CACHE="+l.Cache, "REALNODE_STATE="+l.State)
}

// Run runs node.sh with args and returns its stdout; stderr goes to the test log on failure.
func (l *Lane) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, l.script(), args...)
	cmd.Env = l.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("node.sh %s: %w\n%s%s", strings.Join(args, " "), err, tail(stdout.String()), tail(stderr.String()))
	}
	return stdout.String(), nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// Exec runs a command on the node.
func (l *Lane) Exec(ctx context.Context, n Node, args ...string) (string, error) {
	return l.Run(ctx, append([]string{"exec", n.Name}, args...)...)
}

// MustExec runs a command on the node and fails the test on error.
func (l *Lane) MustExec(t *testing.T, n Node, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := l.Exec(ctx, n, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ReadFile reads a file of the node.
func (l *Lane) ReadFile(ctx context.Context, n Node, path string) (string, error) {
	return l.Exec(ctx, n, "cat", path)
}

// Up starts a node with kubeadm and the kubelet of version.
func (l *Lane) Up(ctx context.Context, n Node, version string) error {
	_, err := l.Run(ctx, "up", n.Name, n.IP, n.PodCIDR, version)
	return err
}

// Down stops a node and removes its state (logs are kept).
func (l *Lane) Down(n Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _ = l.Run(ctx, "down", n.Name)
}

// Cluster is a real cluster of the lane: one control-plane node and workers.
type Cluster struct {
	ControlPlane Node
	Workers      []Node
	// Kubeconfig is kubeadm's admin.conf (server https://<control plane>:6443).
	Kubeconfig []byte
	Client     kubernetes.Interface
}

// CreateCluster runs kubeadm init on cp and kubeadm join on each worker, routes the
// pod CIDRs between the nodes and waits until every node is Ready.
func (l *Lane) CreateCluster(ctx context.Context, t *testing.T, version string, cp Node, workers ...Node) (*Cluster, error) {
	t.Helper()
	// Returned on every error too: the caller's Destroy must stop the nodes that
	// came up before the failure.
	c := &Cluster{ControlPlane: cp, Workers: workers}
	for _, n := range append([]Node{cp}, workers...) {
		if err := l.Up(ctx, n, version); err != nil {
			return c, err
		}
	}
	start := time.Now()
	if _, err := l.Run(ctx, "init", cp.Name, cp.IP, version); err != nil {
		return c, err
	}
	t.Logf("kubeadm init %s on %s: %s", version, cp.Name, time.Since(start).Round(100*time.Millisecond))
	kc, err := l.ReadFile(ctx, cp, "/etc/kubernetes/admin.conf")
	if err != nil {
		return c, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		return c, fmt.Errorf("admin.conf: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return c, err
	}
	c.Kubeconfig, c.Client = []byte(kc), cs
	for _, w := range workers {
		start := time.Now()
		if _, err := l.Run(ctx, "join", w.Name, w.IP, cp.IP); err != nil {
			return c, err
		}
		t.Logf("kubeadm join on %s: %s", w.Name, time.Since(start).Round(100*time.Millisecond))
	}
	all := append([]Node{cp}, workers...)
	for _, a := range all {
		for _, b := range all {
			if a != b {
				if _, err := l.Run(ctx, "route", a.Name, b.PodCIDR, b.IP); err != nil {
					return c, err
				}
			}
		}
	}
	for _, n := range all {
		if err := WaitNode(ctx, cs, n.Name, version, 5*time.Minute); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Destroy stops every node of the cluster.
func (l *Lane) Destroy(c *Cluster) {
	if c == nil {
		return
	}
	for _, n := range append([]Node{c.ControlPlane}, c.Workers...) {
		l.Down(n)
	}
}

// WaitNode waits until the Node is Ready and its kubelet reports version.
func WaitNode(ctx context.Context, cs kubernetes.Interface, name, version string, timeout time.Duration) error {
	var last string
	err := poll(ctx, timeout, time.Second, func(ctx context.Context) bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("kubelet %s, ready %v", n.Status.NodeInfo.KubeletVersion, nodeReady(n))
		return n.Status.NodeInfo.KubeletVersion == version && nodeReady(n)
	})
	if err != nil {
		return fmt.Errorf("node %s Ready at %s: %w (last: %s)", name, version, err, last)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// WaitStaticPods waits until the control-plane mirror pods of node run images of
// version (etcd: any tag) and are ready.
func WaitStaticPods(ctx context.Context, cs kubernetes.Interface, node, version string, timeout time.Duration) error {
	var last string
	err := poll(ctx, timeout, time.Second, func(ctx context.Context) bool {
		for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
			p, err := cs.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, c+"-"+node, metav1.GetOptions{})
			if err != nil {
				last = err.Error()
				return false
			}
			if c != "etcd" && !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+version) {
				last = fmt.Sprintf("%s runs %s", p.Name, p.Spec.Containers[0].Image)
				return false
			}
			if !podReady(p) {
				last = p.Name + " not ready"
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("static pods of %s at %s: %w (last: %s)", node, version, err, last)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// poll calls cond every interval until it is true, timeout passes or ctx ends.
func poll(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
		ok := cond(callCtx)
		callCancel()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s", timeout)
		case <-time.After(interval):
		}
	}
}
