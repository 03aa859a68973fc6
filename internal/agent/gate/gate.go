// Package gate runs the health gates the agent checks before it commits a plan:
// the kubelet reports the target version, the Node is Ready, the control-plane
// static pods run the target version, the local etcd member is healthy, the
// whole etcd cluster is (every member healthy, this member voting again), and the
// plan's user-defined gates pass: a command on the host, an HTTP GET from the node
// (user.go) or a CEL expression over the Node and its pods (internal/celgate,
// evaluated in the CEL helper binary: internal/agent/celrun). BeforeTouch checks the etcd cluster once
// before a control-plane plan starts. The etcd gates and BeforeTouch apply only
// to a node with a local etcd member (protocol.KubernetesPlan.LocalEtcd): with an
// external etcd the node has none to check. Each gate is polled until it passes or the
// gate timeout runs out; the first gate that does not pass fails the plan (and the
// executor rolls everything back).
//
// A failed poll is never final before the gate timeout: after the kubelet swap the
// new kubelet recreates every static pod and a single control plane's API server
// is down for about 30 s (measured on a real kubeadm node), so connection refused,
// 5xx answers and requests that hang are all retried, with a backoff from
// Interval up to MaxInterval. Each poll is bounded (AttemptTimeout for the
// built-in gates, the command timeout for user gates), so a request stuck on a
// dead connection cannot hold a gate: the gate ends at most one attempt after its
// timeout.
//
// Imports: internal/backend, internal/protocol, internal/agent/celrun and
// internal/celgate/celproto (never cel-go: the helper links it), k8s.io/api,
// k8s.io/apimachinery (runtime: objects as JSON for CEL) and the standard library.
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

// EtcdChecker checks the local etcd member and its cluster (kube.Host).
type EtcdChecker interface {
	EtcdHealthy(ctx context.Context) error
	// EtcdQuorum fails unless every member of the cluster is healthy and the
	// local member is a voting member (etcd.CheckQuorum).
	EtcdQuorum(ctx context.Context) error
}

// Checker runs the gates of a plan.
type Checker struct {
	Nodes  NodeReader
	Etcd   EtcdChecker
	Runner backend.Runner
	// Timeout bounds the polling of each gate.
	Timeout time.Duration
	// Interval is the first pause between two polls of a gate; it doubles after
	// each failed poll up to MaxInterval (Interval when zero or smaller).
	Interval    time.Duration
	MaxInterval time.Duration
	// AttemptTimeout bounds one poll of a built-in gate (an API request that hangs
	// while the API server restarts); zero means 10 s.
	AttemptTimeout time.Duration
	// CommandTimeout bounds one run of a user gate without its own timeout.
	CommandTimeout time.Duration
	// Pods lists the pods bound to the node for CEL gates; nil fails every CEL gate.
	Pods PodLister
	// CELHelper is the CEL helper binary's path (cmd/capi-inplace-cel), which
	// evaluates CEL gates; empty means celproto.HelperName beside the running
	// executable, else on $PATH.
	CELHelper string
	// Progress, when set, is told the name of each gate as it starts, so that
	// status can say which gate runs (and, on failure, which one did not pass).
	Progress func(gate string)
	// Holds bounds how long BeforeTouch holds one plan (quorum.go); nil holds
	// without a bound. Copies of the Checker share it.
	Holds *HoldClock
}

// Gate is one named check.
type Gate struct {
	Name  string
	Check func(ctx context.Context) error
	// AttemptTimeout bounds one run of Check; zero means the Checker's.
	AttemptTimeout time.Duration
	// PassWithin is how long the gate may take to pass (a user gate's
	// passWithinSeconds); zero means the Checker's Timeout.
	PassWithin time.Duration
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
		{Name: KubeletVersion, Check: func(ctx context.Context) error {
			n, err := c.Nodes.Node(ctx)
			if err != nil {
				return err
			}
			if got := n.Status.NodeInfo.KubeletVersion; !protocol.SameRelease(got, version) {
				return fmt.Errorf("kubelet reports %s, want %s", got, version)
			}
			return nil
		}},
		{Name: NodeReady, Check: func(ctx context.Context) error {
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
			Gate{Name: StaticPods, Check: func(ctx context.Context) error { return c.staticPods(ctx, p.NodeName, version) }},
		)
	}
	if p.Kubernetes.LocalEtcd() {
		gates = append(gates, c.healthGate(), c.quorumGate())
	}
	for _, ug := range p.Gates {
		gates = append(gates, c.userGate(ug))
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
		if i < 0 || !protocol.SameRelease(image[i+1:], version) {
			return fmt.Errorf("static pod %s runs %s, want tag %s", pod.Name, image, version)
		}
	}
	return nil
}

// Run polls every gate of the plan in order.
func (c *Checker) Run(ctx context.Context, p *protocol.NodePlan) error {
	for _, g := range c.Gates(p) {
		if c.Progress != nil {
			c.Progress(g.Name)
		}
		if err := c.poll(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

func (c *Checker) poll(ctx context.Context, g Gate) error {
	timeout := c.Timeout
	if g.PassWithin > 0 {
		timeout = g.PassWithin
	}
	deadline := time.Now().Add(timeout)
	wait := c.Interval
	var last error
	for {
		last = c.check(ctx, g)
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("gate %s: %w", g.Name, ctx.Err())
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &Error{Gate: g.Name, Timeout: timeout, Err: last}
		}
		// The last poll runs at the deadline, not a backoff step after it.
		select {
		case <-ctx.Done():
			return fmt.Errorf("gate %s: %w", g.Name, ctx.Err())
		case <-time.After(min(wait, left)):
		}
		wait = min(2*wait, max(c.MaxInterval, c.Interval))
	}
}

// check runs one poll, bounded by its attempt timeout. The gate's deadline only
// decides whether another poll follows, so a poll started just before it still
// gets its full attempt.
func (c *Checker) check(ctx context.Context, g Gate) error {
	ctx = WithGate(ctx, g.Name)
	attempt := g.AttemptTimeout
	if attempt <= 0 {
		attempt = c.AttemptTimeout
	}
	if attempt <= 0 {
		attempt = defaultAttemptTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	return g.Check(ctx)
}

const defaultAttemptTimeout = 10 * time.Second
