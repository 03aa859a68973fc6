package realcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/demo"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// dockerCLI is Debian's docker client (hack/install-deps.sh).
const dockerCLI = "/usr/bin/docker"

// NodesOptions are what Nodes need from `make demo-real`.
type NodesOptions struct {
	// Root is the repository: its _cache/realnode holds both releases.
	Root string
	// Dir receives the registry's storage and the extension's policy.
	Dir string
	// DockerHost is the lane's Docker engine (hack/realcapi/dockerd.sh).
	DockerHost string
	// NodeImage is the node image of From (hack/realcapi/images.sh).
	NodeImage string
	// AgentImage is the agent image's reference and AgentImageTar its tarball
	// (hack/realnode/agent-image.sh).
	AgentImage, AgentImageTar string
}

// Nodes are real kubeadm nodes for the demo: containers of the lane's Docker engine
// that the Dev provider's Docker backend makes, whose agents the extension installs
// as in production.
type Nodes struct {
	o          NodesOptions
	mirrors    *Mirrors
	policyFile string
}

var _ demo.Nodes = (*Nodes)(nil)

// NewNodes starts the lane's mirrors and writes the extension's policy.
func NewNodes(ctx context.Context, o NodesOptions) (*Nodes, error) {
	if o.DockerHost == "" || o.NodeImage == "" || o.AgentImage == "" || o.AgentImageTar == "" {
		return nil, errors.New("real nodes need a Docker engine, a node image and the agent image (make demo-real sets them)")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	m, err := StartMirrors(ctx, o.Root, filepath.Join(o.Dir, "registry"), map[string]string{o.AgentImage: o.AgentImageTar})
	if err != nil {
		return nil, err
	}
	n := &Nodes{o: o, mirrors: m, policyFile: filepath.Join(o.Dir, "policy.yaml")}
	policy, err := m.BinariesPolicy()
	if err == nil {
		err = os.WriteFile(n.policyFile, []byte(policy), 0o600)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	return n, nil
}

func (*Nodes) Provider() string { return "Docker backend: real kubeadm nodes as containers" }
func (n *Nodes) Agents() string {
	return "node agents: the extension installs them (a DaemonSet of " + n.o.AgentImage + ") when the update starts"
}
func (*Nodes) Versions() (string, string) { return From, To }

func (n *Nodes) StackOptions(o *localstack.Options) { o.DockerHost = n.o.DockerHost }

func (n *Nodes) Extension(binDir, name string, labels map[string]string) localstack.ExtensionSpec {
	return Extension(binDir, name, n.policyFile, n.o.AgentImage, labels)
}

func (n *Nodes) CreateClusterClass(ctx context.Context, s *localstack.Stack, namespace, class string) error {
	return Class{Name: class, NodeImage: n.o.NodeImage}.Create(ctx, s.Client, namespace)
}

// AttachAgents waits until the workload cluster has n Ready nodes: the agents come
// with the update.
func (*Nodes) AttachAgents(ctx context.Context, s *localstack.Stack, namespace, cluster string, n int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		names, err := readyNodes(ctx, s, namespace, cluster)
		if err == nil && len(names) == n {
			return names, nil
		}
		if err == nil {
			err = fmt.Errorf("%d of %d nodes Ready", len(names), n)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the workload cluster's nodes: %w", err)
		case <-time.After(2 * time.Second):
		}
	}
}

func readyNodes(ctx context.Context, s *localstack.Stack, namespace, cluster string) ([]string, error) {
	kc, err := s.WorkloadKubeconfig(ctx, namespace, cluster)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, err
	}
	list := &corev1.NodeList{}
	if err := c.List(ctx, list); err != nil {
		return nil, err
	}
	var names []string
	for _, node := range list.Items {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				names = append(names, node.Name)
			}
		}
	}
	return names, nil
}

// ReadFile reads path in the node's container.
func (n *Nodes) ReadFile(ctx context.Context, node, path string) (string, error) {
	cmd := exec.CommandContext(ctx, dockerCLI, "exec", node, "cat", path)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+n.o.DockerHost)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker exec %s cat %s: %w: %s", node, path, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (n *Nodes) KeepHints() []string {
	return []string{
		fmt.Sprintf("a node's shell: sudo ip netns exec capi-real env DOCKER_HOST=%s docker exec -it <node> bash", n.o.DockerHost),
	}
}

// Close stops the mirrors.
func (n *Nodes) Close() { n.mirrors.Close() }
