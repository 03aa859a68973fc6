package localstack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AgentOptions tune the simulated agents of one workload cluster.
type AgentOptions struct {
	// GateTimeout is the agent's --gate-timeout (default 2m: longer than the API
	// outages the scenarios inject, shorter than the agent's 5m default so that a
	// failing gate rolls back within a test's patience).
	GateTimeout time.Duration
}

// AgentBinary is the binary of the simulated agents in the stack's BinDir: the
// test harness binary (test/cmd/capi-inplace-dev), whose agent is the product's
// (internal/agent/agentcmd) on a simulated host.
const AgentBinary = "capi-inplace-dev"

// AgentArgs returns the command line of one simulated agent (AgentBinary): the real
// agent code in its simulated-host mode, talking only to the workload cluster's API. Many agents
// share this machine, so none serves a health port.
func AgentArgs(hostRoot, nodeName, kubeconfig string, gateTimeout time.Duration) []string {
	return []string{"agent", "--simulate", "--host-root", hostRoot, "--node-name", nodeName, "--kubeconfig", kubeconfig,
		"--health-addr=0", "--gate-timeout=" + gateTimeout.String(), "--v=1"}
}

// Agents runs one simulated agent process per Node of a workload cluster: it polls
// the cluster's Machines and starts an agent for every nodeRef it has not seen.
type Agents struct {
	stack      *Stack
	namespace  string
	cluster    string
	kubeconfig string
	// agentKubeconfig is what the agents use: the gap-filling API proxy in front of
	// the in-memory server (see apiproxy.go), or kubeconfig itself when
	// Options.DirectWorkloadAPI is set.
	agentKubeconfig string
	proxy           *apiProxy
	marker          *staticPodMarker
	hostsDir        string
	opts            AgentOptions

	mu      sync.Mutex
	procs   map[string]*Process
	stopped bool
	errs    []error
	cancel  context.CancelFunc
	done    chan struct{}
}

// StartAgents writes the workload kubeconfig (from the <cluster>-kubeconfig Secret,
// waiting for it) and starts the supervisor. Each node's simulated host is
// <TempRoot>/hosts/<namespace>/<cluster>/<node>.
func (s *Stack) StartAgents(ctx context.Context, namespace, cluster string, opts AgentOptions) (*Agents, error) {
	if opts.GateTimeout == 0 {
		opts.GateTimeout = 2 * time.Minute
	}
	var kc []byte
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var err error
		if kc, err = s.WorkloadKubeconfig(ctx, namespace, cluster); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	dir := filepath.Join(s.TempRoot, "workloads", namespace)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create workload dir: %w", err)
	}
	kcPath := filepath.Join(dir, cluster+".kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return nil, fmt.Errorf("write workload kubeconfig: %w", err)
	}
	agentKC := kcPath
	var proxy *apiProxy
	if !s.opts.DirectWorkloadAPI {
		var err error
		if proxy, agentKC, err = writeProxyKubeconfig(kc, client.ObjectKey{Namespace: namespace, Name: cluster}, dir, cluster+".agents.kubeconfig"); err != nil {
			return nil, err
		}
		s.logf("agents of %s/%s reach the in-memory API server through the gap-filling proxy %s", namespace, cluster, proxy.addr)
	}
	marker, err := newStaticPodMarker(kc, client.ObjectKey{Namespace: namespace, Name: cluster})
	if err != nil {
		if proxy != nil {
			proxy.close()
		}
		return nil, err
	}
	actx, cancel := context.WithCancel(context.Background())
	a := &Agents{
		marker: marker, opts: opts,
		stack: s, namespace: namespace, cluster: cluster, kubeconfig: kcPath,
		agentKubeconfig: agentKC, proxy: proxy,
		hostsDir: filepath.Join(s.TempRoot, "hosts", namespace, cluster),
		procs:    map[string]*Process{}, cancel: cancel, done: make(chan struct{}),
	}
	s.OnStop(a.Stop)
	go a.loop(actx)
	return a, nil
}

// Kubeconfig returns the path of the workload cluster's kubeconfig (direct, admin).
func (a *Agents) Kubeconfig() string { return a.kubeconfig }

// HostRoot returns the simulated host directory of a node.
func (a *Agents) HostRoot(node string) string { return filepath.Join(a.hostsDir, node) }

// Nodes returns the nodes that have an agent, sorted.
func (a *Agents) Nodes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.procs))
	for n := range a.procs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Process returns the current agent process of a node (nil if none).
func (a *Agents) Process(node string) *Process {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.procs[node]
}

// Errors returns the errors the supervisor met (e.g. an agent that could not start).
func (a *Agents) Errors() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.errs...)
}

// Kill crashes the agent of node (SIGKILL); the supervisor does not restart it until
// Restart is called.
func (a *Agents) Kill(node string) {
	a.mu.Lock()
	p := a.procs[node]
	a.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Restart starts a new agent process for node (after Kill, or to replace a running one).
func (a *Agents) Restart(node string) error {
	a.Kill(node)
	return a.start(node)
}

func (a *Agents) start(node string) error {
	root := a.HostRoot(node)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create simulated host of %s: %w", node, err)
	}
	p, err := a.stack.StartProcess(ProcessSpec{
		Name: fmt.Sprintf("agent-%s-%s", a.namespace, node),
		Path: filepath.Join(a.stack.BinDir(), AgentBinary),
		Args: AgentArgs(root, node, a.agentKubeconfig, a.opts.GateTimeout),
	})
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.procs[node] = p
	a.mu.Unlock()
	a.stack.logf("agent started for node %s/%s (pid %d, host %s)", a.namespace, node, p.Pid(), root)
	return nil
}

func (a *Agents) loop(ctx context.Context) {
	defer close(a.done)
	for {
		machines := &clusterv1.MachineList{}
		err := a.stack.Client.List(ctx, machines, client.InNamespace(a.namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: a.cluster})
		if err == nil {
			for _, m := range machines.Items {
				node := m.Status.NodeRef.Name
				if node == "" {
					continue
				}
				_, cp := m.Labels[clusterv1.MachineControlPlaneLabel]
				if err := a.marker.mark(ctx, node, cp); err != nil {
					a.stack.logf("mark static pods of %s: %v", node, err)
				}
				a.mu.Lock()
				_, seen := a.procs[node]
				stopped := a.stopped
				a.mu.Unlock()
				if seen || stopped {
					continue
				}
				if err := a.start(node); err != nil {
					a.mu.Lock()
					a.errs = append(a.errs, err)
					a.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// Stop stops the supervisor and every agent.
func (a *Agents) Stop() {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return
	}
	a.stopped = true
	a.mu.Unlock()
	a.cancel()
	<-a.done
	a.mu.Lock()
	procs := a.procs
	a.mu.Unlock()
	for _, p := range procs {
		p.Stop(3 * time.Second)
	}
	if a.proxy != nil {
		a.proxy.close()
	}
}
