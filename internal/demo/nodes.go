package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// Nodes is what the demo's cluster runs on: upstream's in-memory provider with a
// simulated agent per node (Simulated, the default), or real kubeadm nodes whose
// agents the extension installs (test/realcapi.Nodes, `make demo-real`). The demo's
// phases, live view and summary are the same on both.
type Nodes interface {
	// Provider and Agents describe the nodes and their agents in the phase lines.
	Provider() string
	Agents() string
	// Versions are the releases the cluster starts at and is updated to.
	Versions() (from, to string)
	// StackOptions adjusts the local Cluster API stack's options.
	StackOptions(o *localstack.Options)
	// Extension is our extension as the stack runs it.
	Extension(binDir, name string, labels map[string]string) localstack.ExtensionSpec
	// CreateClusterClass creates the ClusterClass class in namespace: a required
	// files variable ([{path, content}]) patched into every KubeadmConfig, a
	// MachineDeployment class WorkerClass, and a control plane that may have one
	// replica.
	CreateClusterClass(ctx context.Context, stack *localstack.Stack, namespace, class string) error
	// AttachAgents starts, or waits for, what runs the cluster's n nodes' updates
	// and returns the nodes' names.
	AttachAgents(ctx context.Context, stack *localstack.Stack, namespace, cluster string, n int) ([]string, error)
	// ReadFile reads path on a node's host.
	ReadFile(ctx context.Context, node, path string) (string, error)
	// KeepHints are the lines --keep prints on how to reach the nodes.
	KeepHints() []string
	// Close stops what the Nodes started.
	Close()
}

// WorkerClass is the MachineDeployment class of every Nodes' ClusterClass.
const WorkerClass = "default-worker"

// Simulated is the in-memory provider's nodes, each with a simulated agent
// (bin/capi-inplace-dev agent --simulate) on a host directory of its own.
type Simulated struct {
	agents *localstack.Agents
}

var _ Nodes = (*Simulated)(nil)

func (*Simulated) Provider() string { return "in-memory infrastructure" }
func (*Simulated) Agents() string {
	return "simulated node agents (bin/capi-inplace-dev agent --simulate), one per node"
}
func (*Simulated) Versions() (string, string)       { return "v1.35.0", "v1.36.0" }
func (*Simulated) StackOptions(*localstack.Options) {}

// Extension runs the extension without its agent DaemonSet: the simulated agents
// stand in for it.
func (*Simulated) Extension(binDir, name string, labels map[string]string) localstack.ExtensionSpec {
	return localstack.OurExtension(binDir, name, labels, nil)
}

// CreateClusterClass creates localstack's ClusterClass, its
// KubeadmControlPlaneTemplate at KCP's default maxSurge 1: KCP refuses maxSurge 0
// below three replicas, and the single-node path makes sure no Machine is created.
// Templates are immutable, hence delete and create.
func (*Simulated) CreateClusterClass(ctx context.Context, s *localstack.Stack, namespace, class string) error {
	if err := s.CreateClusterClass(ctx, namespace, class); err != nil {
		return fmt.Errorf("create ClusterClass: %w", err)
	}
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion(controlplanev1.GroupVersion.String())
	tmpl.SetKind("KubeadmControlPlaneTemplate")
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: class + "-control-plane"}, tmpl); err != nil {
		return fmt.Errorf("get KubeadmControlPlaneTemplate: %w", err)
	}
	if err := s.Client.Delete(ctx, tmpl); err != nil {
		return fmt.Errorf("delete KubeadmControlPlaneTemplate: %w", err)
	}
	unstructured.RemoveNestedField(tmpl.Object, "spec", "template", "spec", "rollout")
	fresh := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tmpl.GetAPIVersion(), "kind": tmpl.GetKind(),
		"metadata": map[string]any{"name": tmpl.GetName(), "namespace": namespace},
		"spec":     tmpl.Object["spec"],
	}}
	return poll(ctx, 30*time.Second, func() error {
		if err := s.Client.Create(ctx, fresh); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("recreate KubeadmControlPlaneTemplate: %w", err)
		}
		return nil
	})
}

// AttachAgents starts a simulated agent per node and waits until each runs.
func (sim *Simulated) AttachAgents(ctx context.Context, s *localstack.Stack, namespace, cluster string, n int) ([]string, error) {
	a, err := s.StartAgents(ctx, namespace, cluster, localstack.AgentOptions{})
	if err != nil {
		return nil, fmt.Errorf("start agents: %w", err)
	}
	sim.agents = a
	err = poll(ctx, 2*time.Minute, func() error {
		if errs := a.Errors(); len(errs) > 0 {
			return fmt.Errorf("agents: %v", errs)
		}
		if got := len(a.Nodes()); got != n {
			return fmt.Errorf("%d agents, want %d", got, n)
		}
		for _, node := range a.Nodes() {
			if exited, err := a.Process(node).Exited(); exited {
				return fmt.Errorf("agent of %s exited: %w (log %s)", node, err, a.Process(node).LogPath)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for agents: %w", err)
	}
	return a.Nodes(), nil
}

// ReadFile reads path under the node's simulated host root.
func (sim *Simulated) ReadFile(_ context.Context, node, path string) (string, error) {
	if sim.agents == nil {
		return "", fmt.Errorf("no agent attached to %s", node)
	}
	b, err := os.ReadFile(filepath.Join(sim.agents.HostRoot(node), path))
	return string(b), err
}

func (sim *Simulated) KeepHints() []string {
	if sim.agents == nil {
		return nil
	}
	return []string{
		"workload cluster kubeconfig (in-memory API server): " + sim.agents.Kubeconfig(),
		"simulated hosts: " + filepath.Dir(sim.agents.HostRoot("x")),
	}
}

// Close stops the simulated agents (the stack's teardown stops them too).
func (sim *Simulated) Close() {
	if sim.agents != nil {
		sim.agents.Stop()
	}
}
