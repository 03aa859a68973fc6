// Package gate runs the health gates the agent checks before it commits a plan:
// the kubelet reports the target version, the Node is Ready, the control-plane
// static pods run the target version, the local etcd member is healthy, and the
// plan's user-defined commands pass. Each gate is polled until it passes or the
// gate timeout runs out; the first gate that does not pass fails the plan (and the
// executor rolls everything back).
//
// Imports: internal/backend, internal/protocol, k8s.io/api and the standard library.
package gate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Built-in gate names.
const (
	KubeletVersion = "kubelet-version"
	NodeReady      = "node-ready"
	StaticPods     = "static-pods"
	EtcdHealth     = "etcd-health"
)

// ControlPlanePods returns the static pods whose image tag is the Kubernetes version.
func ControlPlanePods() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
}

// NodeReader reads the agent's own Node and the mirror pods of its static pods.
type NodeReader interface {
	Node(ctx context.Context) (*corev1.Node, error)
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// EtcdChecker checks the local etcd member (kube.Host).
type EtcdChecker interface {
	EtcdHealthy(ctx context.Context) error
}

// Faults lets the simulated host make a gate fail; nil in production.
type Faults interface {
	GateFault(name string) error
}

// Checker runs the gates of a plan.
type Checker struct {
	Nodes  NodeReader
	Etcd   EtcdChecker
	Runner backend.Runner
	// Timeout bounds the polling of each gate.
	Timeout time.Duration
	// Interval is the pause between two polls of a gate.
	Interval time.Duration
	// CommandTimeout bounds one run of a user gate without its own timeout.
	CommandTimeout time.Duration
	Faults         Faults
}

// Gate is one named check.
type Gate struct {
	Name  string
	Check func(ctx context.Context) error
}

// Error is a gate that did not pass.
type Error struct {
	Gate    string
	Timeout time.Duration
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("gate %s did not pass within %s: %v", e.Gate, e.Timeout, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Gates returns the gates for a plan, in the order they run.
func (c *Checker) Gates(p *protocol.NodePlan) []Gate {
	version := p.Kubernetes.Version
	gates := []Gate{
		{KubeletVersion, func(ctx context.Context) error {
			n, err := c.Nodes.Node(ctx)
			if err != nil {
				return err
			}
			if got := n.Status.NodeInfo.KubeletVersion; !sameVersion(got, version) {
				return fmt.Errorf("kubelet reports %s, want %s", got, version)
			}
			return nil
		}},
		{NodeReady, func(ctx context.Context) error {
			n, err := c.Nodes.Node(ctx)
			if err != nil {
				return err
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue {
						return nil
					}
					return fmt.Errorf("node is not Ready: %s: %s", cond.Reason, cond.Message)
				}
			}
			return errors.New("node has no Ready condition")
		}},
	}
	if p.Kubernetes.Role == protocol.RoleControlPlane {
		gates = append(gates,
			Gate{StaticPods, func(ctx context.Context) error { return c.staticPods(ctx, p.NodeName, version) }},
			Gate{EtcdHealth, c.Etcd.EtcdHealthy},
		)
	}
	for _, ug := range p.Gates {
		gates = append(gates, Gate{ug.Name, func(ctx context.Context) error {
			timeout := c.CommandTimeout
			if ug.TimeoutSeconds > 0 {
				timeout = time.Duration(ug.TimeoutSeconds) * time.Second
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, err := c.Runner.Run(ctx, backend.Command{Name: ug.Command[0], Args: ug.Command[1:]})
			return err
		}})
	}
	return gates
}

func (c *Checker) staticPods(ctx context.Context, node, version string) error {
	for _, name := range ControlPlanePods() {
		pod, err := c.Nodes.Pod(ctx, "kube-system", name+"-"+node)
		if err != nil {
			return fmt.Errorf("static pod %s: %w", name, err)
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("static pod %s is %s, not Running", pod.Name, pod.Status.Phase)
		}
		image := ""
		for _, ctr := range pod.Spec.Containers {
			if ctr.Name == name {
				image = ctr.Image
			}
		}
		if image == "" {
			return fmt.Errorf("static pod %s has no container %s", pod.Name, name)
		}
		i := strings.LastIndex(image, ":")
		if i < 0 || !sameVersion(image[i+1:], version) {
			return fmt.Errorf("static pod %s runs %s, want tag %s", pod.Name, image, version)
		}
	}
	return nil
}

// Run polls every gate of the plan in order.
func (c *Checker) Run(ctx context.Context, p *protocol.NodePlan) error {
	for _, g := range c.Gates(p) {
		if err := c.poll(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

func (c *Checker) poll(ctx context.Context, g Gate) error {
	deadline := time.Now().Add(c.Timeout)
	var last error
	for {
		last = c.check(ctx, g)
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gate %s: %w", g.Name, ctx.Err())
		}
		if time.Now().After(deadline) {
			return &Error{Gate: g.Name, Timeout: c.Timeout, Err: last}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gate %s: %w", g.Name, ctx.Err())
		case <-time.After(c.Interval):
		}
	}
}

func (c *Checker) check(ctx context.Context, g Gate) error {
	if c.Faults != nil {
		if err := c.Faults.GateFault(g.Name); err != nil {
			return err
		}
	}
	return g.Check(ctx)
}

func sameVersion(a, b string) bool {
	return strings.SplitN(strings.TrimPrefix(a, "v"), "+", 2)[0] == strings.SplitN(strings.TrimPrefix(b, "v"), "+", 2)[0]
}
