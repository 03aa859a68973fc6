package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

// Options configure Run.
type Options struct {
	// BinDir holds the stack's binaries and capi-inplace (make tools-capi build).
	BinDir string
	// ArtifactsDir receives every process's log.
	ArtifactsDir string
	// Timeout bounds everything up to the summary (default 15m); --keep's wait is not
	// counted.
	Timeout time.Duration
	// Keep leaves the stack running after the summary until ctx is cancelled.
	Keep bool
	// Out receives the demo's output; TTY makes the live view redraw in place.
	Out io.Writer
	TTY bool
	// Width is the terminal's width when TTY (0: unknown).
	Width int
	// Interval between two live frames (default 1s).
	Interval time.Duration
	// PortWait is how long to wait for the in-memory provider's port when another stack
	// holds it; zero fails at once.
	PortWait time.Duration
	// FromVersion and ToVersion default to v1.35.0 and v1.36.0.
	FromVersion, ToVersion string
}

// The demo's objects and names.
const (
	Namespace   = "demo"
	ClusterName = "demo"
	className   = "inplace"
	// extensionLabel selects the demo namespace for our ExtensionConfig and the hold webhook.
	extensionLabel = "demo.capi-inplace.dev/extension"
	// FilePath is the file the demo changes on every node (the ClusterClass files variable).
	FilePath    = "/etc/capi-inplace-demo/motd"
	fileBefore  = "hello from the first version\n"
	fileAfter   = "upgraded in place by capi-inplace\n"
	workers     = 2
	machinesAll = 1 + workers
	// inMemoryPort is the fixed port of upstream's in-memory provider (CAPI v1.14.2,
	// not configurable): one local stack per machine.
	inMemoryPort = 19000
)

func (o *Options) defaults() {
	if o.Timeout == 0 {
		o.Timeout = 15 * time.Minute
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.FromVersion == "" {
		o.FromVersion = "v1.35.0"
	}
	if o.ToVersion == "" {
		o.ToVersion = "v1.36.0"
	}
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = filepath.Join("_artifacts", "demo-"+time.Now().UTC().Format("20060102-150405"))
	}
}

// ErrChecksFailed is returned when the rollout ran but a summary check failed.
var ErrChecksFailed = errors.New("demo: a summary check failed")

// run holds the demo's state between phases.
type run struct {
	o       Options
	start   time.Time
	stack   *localstack.Stack
	agents  *localstack.Agents
	stackLn *switchWriter
}

// Run runs the demo (see the package doc). It returns ErrChecksFailed (wrapped) when a
// check of the summary fails, and tears everything down before returning.
func Run(ctx context.Context, o Options) error {
	o.defaults()
	r := &run{o: o, start: time.Now()}
	if err := waitPort(ctx, inMemoryPort, o.PortWait); err != nil {
		return err
	}
	for _, d := range []*string{&r.o.BinDir, &r.o.ArtifactsDir} {
		abs, err := filepath.Abs(*d)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		*d = abs
	}
	if err := os.MkdirAll(r.o.ArtifactsDir, 0o755); err != nil {
		return fmt.Errorf("demo: create artifacts dir: %w", err)
	}
	logFile, err := os.Create(filepath.Join(r.o.ArtifactsDir, "localstack.log"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	r.stackLn = &switchWriter{file: logFile, console: o.Out, prefix: "    "}

	tctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	defer func() {
		if r.stack != nil {
			r.stackLn.setConsole(true)
			r.printf("==> tearing down: stopping every process and removing %s\n", r.stack.TempRoot)
			r.stack.Stop()
		}
	}()
	err = r.demo(tctx, ctx)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("demo interrupted: %w", ctx.Err())
	}
	if err != nil && tctx.Err() != nil && !errors.Is(err, ErrChecksFailed) {
		return fmt.Errorf("demo: time-out after %s (--timeout): %w", o.Timeout, err)
	}
	return err
}

func (r *run) printf(format string, args ...any) {
	fmt.Fprintf(r.o.Out, format, args...)
}

func (r *run) phase(n int, what string) func(format string, args ...any) {
	t0 := time.Now()
	r.printf("==> [%d/6] %s\n", n, what)
	return func(format string, args ...any) {
		r.printf("    %s (%s)\n", fmt.Sprintf(format, args...), time.Since(t0).Round(100*time.Millisecond))
	}
}

// demo runs the phases; ctx is bounded by --timeout, outer is the command's context
// (--keep waits on it).
func (r *run) demo(ctx, outer context.Context) error {
	o := r.o
	done := r.phase(1, "local Cluster API stack: kube-apiserver + etcd, core, KubeadmControlPlane, kubeadm bootstrap and in-memory managers")
	stack, err := localstack.Start(ctx, localstack.Options{BinDir: o.BinDir, ArtifactsDir: o.ArtifactsDir, Out: r.stackLn})
	if err != nil {
		return fmt.Errorf("start the local stack: %w", err)
	}
	r.stack = stack
	done("control plane and managers ready, logs in %s", o.ArtifactsDir)

	done = r.phase(2, "capi-inplace extension over HTTPS, registered with Cluster API")
	labels := map[string]string{extensionLabel: "capi-inplace"}
	ext, err := stack.StartExtension(ctx, localstack.OurExtension(o.BinDir, "capi-inplace", labels, nil))
	if err != nil {
		return fmt.Errorf("start the extension: %w", err)
	}
	if err := registerHoldWebhook(ctx, stack, ext, labels); err != nil {
		return err
	}
	done("extension serving on 127.0.0.1:%d; ExtensionConfig capi-inplace discovered; single-node hold webhook registered", ext.Port)

	done = r.phase(3, fmt.Sprintf("ClusterClass cluster %s/%s at %s: 1 control-plane node (single-node path) + %d workers", Namespace, ClusterName, o.FromVersion, workers))
	if err := r.createCluster(ctx); err != nil {
		return err
	}
	if err := r.waitClusterReady(ctx); err != nil {
		return err
	}
	done("all %d machines running", machinesAll)

	done = r.phase(4, "simulated node agents (bin/capi-inplace agent --simulate), one per node")
	r.stackLn.setConsole(false)
	if r.agents, err = r.startAgents(ctx); err != nil {
		return err
	}
	before, err := r.machineIDs(ctx)
	if err != nil {
		return err
	}
	done("agents attached to %v", r.agents.Nodes())
	for _, m := range before {
		r.printf("    machine %-32s %-14s uid %s node %s\n", m.Name, m.Role, m.UID, m.Node)
	}

	r.phase(5, fmt.Sprintf("one update: spec.topology.version %s -> %s and %s changed (files variable)", o.FromVersion, o.ToVersion, FilePath))
	w, err := r.watchMachines(ctx)
	if err != nil {
		return err
	}
	defer w.stop()
	rolloutStart := time.Now()
	if err := r.changeTopology(ctx); err != nil {
		return err
	}
	tl := &Timeline{From: rolloutStart, ToVersion: o.ToVersion}
	agentDur, rolloutErr := r.live(ctx, rolloutStart, w, tl)
	rollout := time.Since(rolloutStart)

	r.phase(6, "checks")
	out := r.outcome(context.WithoutCancel(ctx), before, w, tl.Durations(), agentDur)
	out.RolloutErr, out.Rollout, out.Total = rolloutErr, rollout, time.Since(r.start)
	checks := Evaluate(out)
	if err := RenderSummary(o.Out, out, checks); err != nil {
		return err
	}
	var result error
	if !Passed(checks) {
		result = fmt.Errorf("%w (logs in %s)", ErrChecksFailed, o.ArtifactsDir)
	}
	if o.Keep && outer.Err() == nil {
		r.stackLn.setConsole(true)
		bin := filepath.Join(o.BinDir, "capi-inplace")
		r.printf("\nThe stack keeps running (--keep). Ctrl-C tears it down.\n")
		r.printf("  management kubeconfig: %s\n", stack.KubeconfigPath)
		r.printf("  kubectl --kubeconfig %s get clusters,machines -A\n", stack.KubeconfigPath)
		r.printf("  %s status %s -n %s --kubeconfig %s -w\n", bin, ClusterName, Namespace, stack.KubeconfigPath)
		r.printf("  workload cluster kubeconfig (in-memory API server): %s\n", r.agents.Kubeconfig())
		r.printf("  simulated hosts: %s\n", filepath.Dir(r.agents.HostRoot("x")))
		r.printf("  logs: %s\n", o.ArtifactsDir)
		<-outer.Done()
	}
	return result
}

// waitPort fails (or waits up to wait) while something listens on port.
func waitPort(ctx context.Context, port int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err == nil {
			_ = l.Close()
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("demo: port %d is in use: another local Cluster API stack (a demo, `make e2e` or `make bench`) runs on this machine, "+
				"and upstream's in-memory provider can only run once per machine (fixed port). Stop it, or run the demo in its own "+
				"network namespace: sudo unshare -n bench/netns.sh bin/capi-inplace demo (%w)", port, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// registerHoldWebhook registers the extension's single-node hold webhook for the demo
// namespace, as a deployment's MutatingWebhookConfiguration would.
func registerHoldWebhook(ctx context.Context, stack *localstack.Stack, ext *localstack.Extension, labels map[string]string) error {
	url := fmt.Sprintf("https://127.0.0.1:%d%s", ext.Port, singlenode.DefaultWebhookPath)
	hook := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ext.Cert.CAPEM})
	hook.NamespaceSelector = &metav1.LabelSelector{MatchLabels: labels}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-single-node"},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	if err := stack.Client.Create(ctx, cfg); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register the single-node hold webhook: %w", err)
	}
	return nil
}

// createCluster creates the namespace, our ClusterClass (its KubeadmControlPlaneTemplate
// at KCP's default maxSurge 1: KCP refuses maxSurge 0 below three replicas; the
// single-node path makes sure no Machine is created anyway) and the opted-in Cluster.
func (r *run) createCluster(ctx context.Context) error {
	s := r.stack
	if err := s.CreateNamespace(ctx, Namespace, map[string]string{extensionLabel: "capi-inplace"}); err != nil {
		return err
	}
	if err := s.CreateClusterClass(ctx, Namespace, className); err != nil {
		return fmt.Errorf("create ClusterClass: %w", err)
	}
	if err := r.defaultControlPlaneRollout(ctx); err != nil {
		return err
	}
	files, err := json.Marshal([]localstack.File{{Path: FilePath, Content: fileBefore}})
	if err != nil {
		return err
	}
	// The opt-in goes on at creation: a later patch can lose the race with the topology
	// controller's own writes of the Cluster's annotations.
	c := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ClusterName,
			Annotations: map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:          clusterv1.NetworkRanges{CIDRBlocks: []string{"192.168.0.0/16"}},
				Services:      clusterv1.NetworkRanges{CIDRBlocks: []string{"10.128.0.0/12"}},
				ServiceDomain: "cluster.local",
			},
			Topology: clusterv1.Topology{
				ClassRef:     clusterv1.ClusterClassRef{Name: className},
				Version:      r.o.FromVersion,
				ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To[int32](1)},
				Workers: clusterv1.WorkersTopology{MachineDeployments: []clusterv1.MachineDeploymentTopology{{
					Class: "default-worker", Name: "md-0", Replicas: ptr.To[int32](workers),
					// No surge, one node at a time: the workers go in place, never replaced.
					Rollout: clusterv1.MachineDeploymentTopologyRolloutSpec{Strategy: clusterv1.MachineDeploymentTopologyRolloutStrategy{
						Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
						RollingUpdate: clusterv1.MachineDeploymentTopologyRolloutStrategyRollingUpdate{
							MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1)),
						},
					}},
				}}},
				Variables: []clusterv1.ClusterVariable{{Name: "files", Value: apiextensionsv1.JSON{Raw: files}}},
			},
		},
	}
	if err := s.Client.Create(ctx, c); err != nil {
		return fmt.Errorf("create cluster %s/%s: %w", Namespace, ClusterName, err)
	}
	r.printf("    cluster created with %s: \"true\"\n", inplacev1.SingleNodeControlPlaneAnnotation)
	return nil
}

// defaultControlPlaneRollout recreates the ClusterClass's KubeadmControlPlaneTemplate
// without its rollout (maxSurge 0), which KCP refuses for one replica. Templates are
// immutable, hence delete and create.
func (r *run) defaultControlPlaneRollout(ctx context.Context) error {
	s := r.stack
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion(controlplanev1.GroupVersion.String())
	tmpl.SetKind("KubeadmControlPlaneTemplate")
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: className + "-control-plane"}, tmpl); err != nil {
		return fmt.Errorf("get KubeadmControlPlaneTemplate: %w", err)
	}
	if err := s.Client.Delete(ctx, tmpl); err != nil {
		return fmt.Errorf("delete KubeadmControlPlaneTemplate: %w", err)
	}
	unstructured.RemoveNestedField(tmpl.Object, "spec", "template", "spec", "rollout")
	fresh := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": tmpl.GetAPIVersion(), "kind": tmpl.GetKind(),
		"metadata": map[string]any{"name": tmpl.GetName(), "namespace": Namespace},
		"spec":     tmpl.Object["spec"],
	}}
	return poll(ctx, 30*time.Second, func() error {
		if err := s.Client.Create(ctx, fresh); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("recreate KubeadmControlPlaneTemplate: %w", err)
		}
		return nil
	})
}

// poll calls check every second until it returns nil, ctx ends or timeout passes.
func poll(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

func (r *run) machines(ctx context.Context) ([]clusterv1.Machine, error) {
	list := &clusterv1.MachineList{}
	if err := r.stack.Client.List(ctx, list, client.InNamespace(Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ClusterName}); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

func (r *run) cluster(ctx context.Context) (*clusterv1.Cluster, error) {
	c := &clusterv1.Cluster{}
	if err := r.stack.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: ClusterName}, c); err != nil {
		return nil, fmt.Errorf("get cluster: %w", err)
	}
	return c, nil
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// waitClusterReady waits until every Machine has a Node and is Ready and the Cluster is
// Available, printing the count whenever it moves.
func (r *run) waitClusterReady(ctx context.Context) error {
	last := ""
	return poll(ctx, r.o.Timeout, func() error {
		ms, err := r.machines(ctx)
		if err != nil {
			return err
		}
		withNode, ready := 0, 0
		for _, m := range ms {
			if m.Status.NodeRef.Name != "" {
				withNode++
			}
			if conditionTrue(m.Status.Conditions, clusterv1.ReadyCondition) {
				ready++
			}
		}
		c, err := r.cluster(ctx)
		if err != nil {
			return err
		}
		available := conditionTrue(c.Status.Conditions, clusterv1.AvailableCondition)
		line := fmt.Sprintf("machines: %d/%d created, %d with a node, %d ready; cluster available: %v", len(ms), machinesAll, withNode, ready, available)
		if line != last {
			r.printf("    %s %s\n", time.Now().Format(time.TimeOnly), line)
			last = line
		}
		if len(ms) == machinesAll && ready == machinesAll && withNode == machinesAll && available {
			return nil
		}
		return errors.New(line)
	})
}

func (r *run) startAgents(ctx context.Context) (*localstack.Agents, error) {
	a, err := r.stack.StartAgents(ctx, Namespace, ClusterName, localstack.AgentOptions{})
	if err != nil {
		return nil, fmt.Errorf("start agents: %w", err)
	}
	err = poll(ctx, 2*time.Minute, func() error {
		if errs := a.Errors(); len(errs) > 0 {
			return fmt.Errorf("agents: %v", errs)
		}
		if n := len(a.Nodes()); n != machinesAll {
			return fmt.Errorf("%d agents, want %d", n, machinesAll)
		}
		for _, n := range a.Nodes() {
			if exited, err := a.Process(n).Exited(); exited {
				return fmt.Errorf("agent of %s exited: %v (log %s)", n, err, a.Process(n).LogPath)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for agents: %w", err)
	}
	return a, nil
}

func (r *run) machineIDs(ctx context.Context) ([]MachineID, error) {
	ms, err := r.machines(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]MachineID, 0, len(ms))
	for _, m := range ms {
		role := status.RoleWorker
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			role = status.RoleControlPlane
		}
		out = append(out, MachineID{Name: m.Name, UID: string(m.UID), Role: role, Node: m.Status.NodeRef.Name})
	}
	// Control plane first, as the rollout goes.
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Role == status.RoleControlPlane && out[j].Role != status.RoleControlPlane
	})
	return out, nil
}

// changeTopology moves spec.topology.version one minor up and changes the files
// variable in a single patch: one rollout.
func (r *run) changeTopology(ctx context.Context) error {
	c, err := r.cluster(ctx)
	if err != nil {
		return err
	}
	base := c.DeepCopy()
	c.Spec.Topology.Version = r.o.ToVersion
	raw, err := json.Marshal([]localstack.File{{Path: FilePath, Content: fileAfter}})
	if err != nil {
		return err
	}
	found := false
	for i := range c.Spec.Topology.Variables {
		if c.Spec.Topology.Variables[i].Name == "files" {
			c.Spec.Topology.Variables[i].Value = apiextensionsv1.JSON{Raw: raw}
			found = true
		}
	}
	if !found {
		return errors.New("cluster has no files variable")
	}
	if err := r.stack.Client.Patch(ctx, c, client.MergeFrom(base)); err != nil {
		return fmt.Errorf("patch cluster topology: %w", err)
	}
	r.printf("    %s patched Cluster %s/%s: version %s -> %s, %s %q -> %q\n", time.Now().Format(time.TimeOnly),
		Namespace, ClusterName, r.o.FromVersion, r.o.ToVersion, FilePath, strings.TrimSpace(fileBefore), strings.TrimSpace(fileAfter))
	return nil
}

// machineWatch counts Machines created and deleted after it started.
type machineWatch struct {
	mu      sync.Mutex
	created []string
	deleted []string
	stop    func()
}

func (w *machineWatch) createdMachines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.created...)
}

func (r *run) watchMachines(ctx context.Context) (*machineWatch, error) {
	wc, err := client.NewWithWatch(r.stack.Config, client.Options{Scheme: r.stack.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("watch client: %w", err)
	}
	list := &clusterv1.MachineList{}
	if err := r.stack.Client.List(ctx, list, client.InNamespace(Namespace)); err != nil {
		return nil, fmt.Errorf("list machines: %w", err)
	}
	existing := map[string]bool{}
	for _, m := range list.Items {
		existing[string(m.UID)] = true
	}
	w, err := wc.Watch(ctx, &clusterv1.MachineList{}, client.InNamespace(Namespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return nil, fmt.Errorf("watch machines: %w", err)
	}
	mw := &machineWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*clusterv1.Machine)
			if !ok {
				continue
			}
			mw.mu.Lock()
			switch ev.Type {
			case watch.Added:
				if !existing[string(m.UID)] {
					mw.created = append(mw.created, m.Name)
				}
			case watch.Deleted:
				mw.deleted = append(mw.deleted, m.Name)
			}
			mw.mu.Unlock()
		}
	}()
	return mw, nil
}

// live re-renders the status table every Interval until the rollout is done, a node
// fails or ctx ends, feeding tl. It returns each node's plan time as its agent reported it
// (plan start to commit).
func (r *run) live(ctx context.Context, since time.Time, w *machineWatch, tl *Timeline) (map[string]time.Duration, error) {
	g := status.Gatherer{Management: r.stack.Client, Workload: status.KubeconfigWorkload{Management: r.stack.Client}}
	view := &Live{TTY: r.o.TTY, Width: r.o.Width}
	durations := map[string]time.Duration{}
	tick := time.NewTicker(r.o.Interval)
	defer tick.Stop()
	var lastTable string
	for {
		snap, err := g.Gather(ctx, Namespace, ClusterName)
		if err == nil {
			now := time.Now()
			rep := status.Build(snap, now)
			tl.Observe(rep, now)
			var buf bytes.Buffer
			_ = status.RenderTable(&buf, rep)
			lastTable = buf.String()
			if frame := view.Frame(rep, lastTable, time.Since(since)); frame != "" {
				r.printf("%s", frame)
			}
			for _, c := range rep.Clusters {
				for _, m := range c.Machines {
					if m.StartedAt != nil && !m.StartedAt.Before(since.Add(-5*time.Second)) && m.Phase.Terminal() {
						durations[m.Name] = time.Duration(m.ElapsedSeconds) * time.Second
					}
				}
			}
			if failed := rep.FailedMachines(); len(failed) > 0 {
				return durations, fmt.Errorf("in-place update failed on %s", strings.Join(failed, ", "))
			}
			if created := w.createdMachines(); len(created) > 0 {
				// A new Machine means a replacement: the demo's point is already lost.
				return durations, fmt.Errorf("Machine(s) created during the rollout: %s", strings.Join(created, ", "))
			}
			if err := r.rolledOut(ctx, rep); err == nil {
				if !r.o.TTY {
					r.printf("\n%s", lastTable)
				}
				return durations, nil
			}
		} else if ctx.Err() == nil && !r.o.TTY {
			r.printf("    %s status: %v\n", time.Now().Format(time.TimeOnly), err)
		}
		select {
		case <-ctx.Done():
			if !r.o.TTY && lastTable != "" {
				r.printf("\n%s", lastTable)
			}
			return durations, ctx.Err()
		case <-tick.C:
		}
	}
}

// rolledOut returns nil once every Machine and Node is at the new version, up to date,
// no longer updating, the control plane released by the single-node path, the Cluster's
// machines up to date and the new file on every simulated host.
func (r *run) rolledOut(ctx context.Context, rep status.Report) error {
	if len(rep.Clusters) != 1 || len(rep.Clusters[0].Machines) != machinesAll {
		return errors.New("machines missing from the view")
	}
	for _, m := range rep.Clusters[0].Machines {
		if m.Version != r.o.ToVersion || m.KubeletVersion != r.o.ToVersion || m.InProgress() {
			return fmt.Errorf("machine %s not done", m.Name)
		}
		if m.Conditions.UpToDate == nil || m.Conditions.UpToDate.Status != "True" {
			return fmt.Errorf("machine %s not up to date", m.Name)
		}
	}
	ms, err := r.machines(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
			return fmt.Errorf("machine %s still updating", m.Name)
		}
	}
	c, err := r.cluster(ctx)
	if err != nil {
		return err
	}
	for _, t := range []string{clusterv1.ClusterControlPlaneMachinesUpToDateCondition, clusterv1.ClusterWorkerMachinesUpToDateCondition} {
		if !conditionTrue(c.Status.Conditions, t) {
			return fmt.Errorf("cluster %s not True", t)
		}
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := r.stack.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: c.Spec.ControlPlaneRef.Name}, kcp); err != nil {
		return err
	}
	if _, held := kcp.Annotations[inplacev1.HoldAnnotation]; held {
		return errors.New("control plane still held")
	}
	if _, paused := kcp.Annotations[clusterv1.PausedAnnotation]; paused {
		return errors.New("control plane still paused")
	}
	for _, n := range r.agents.Nodes() {
		b, err := os.ReadFile(filepath.Join(r.agents.HostRoot(n), FilePath))
		if err != nil || string(b) != fileAfter {
			return fmt.Errorf("host %s lacks the new file", n)
		}
	}
	return nil
}

// outcome collects what the summary checks.
func (r *run) outcome(ctx context.Context, before []MachineID, w *machineWatch, durations, agentDur map[string]time.Duration) Outcome {
	o := Outcome{
		FromVersion: r.o.FromVersion, ToVersion: r.o.ToVersion, FilePath: FilePath, FileContent: fileAfter,
		Before: before, Durations: durations, AgentDurations: agentDur, Kubelets: map[string]string{},
		HostFiles: map[string]string{}, HostErrs: map[string]string{},
	}
	if after, err := r.machineIDs(ctx); err == nil {
		o.After = after
	}
	// Give the watch a moment to deliver the last events.
	time.Sleep(500 * time.Millisecond)
	w.mu.Lock()
	o.Created = append([]string(nil), w.created...)
	o.Deleted = append([]string(nil), w.deleted...)
	w.mu.Unlock()
	if kubelets, err := r.kubelets(ctx); err == nil {
		o.Kubelets = kubelets
	}
	for _, n := range r.agents.Nodes() {
		b, err := os.ReadFile(filepath.Join(r.agents.HostRoot(n), FilePath))
		if err != nil {
			o.HostErrs[n] = err.Error()
			continue
		}
		o.HostFiles[n] = string(b)
	}
	return o
}

func (r *run) kubelets(ctx context.Context) (map[string]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.agents.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("workload kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: r.stack.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("workload client: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out, nil
}

// switchWriter sends the stack's progress lines to its log file and, while console is
// on, to the demo's output (indented); the live view turns it off so that its redraw
// is not broken by other lines.
type switchWriter struct {
	mu      sync.Mutex
	file    io.Writer
	console io.Writer
	prefix  string
	off     bool
}

func (w *switchWriter) setConsole(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.off = !on
}

func (w *switchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.file.Write(p)
	if !w.off {
		_, _ = io.WriteString(w.console, w.prefix+string(p))
	}
	return len(p), nil
}
