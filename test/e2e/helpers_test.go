//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// Extension namespace labels: each extension serves the namespaces carrying its value.
const (
	extensionLabel    = "e2e.capi-inplace.dev/extension"
	extOurs           = "capi-inplace"
	extOursDisabled   = "capi-inplace-disabled"
	extUpstream       = "upstream-test-extension"
	fromVersion       = "v1.35.0"
	toVersion         = "v1.36.0"
	clusterReadyAfter = 5 * time.Minute
)

// scenario is one test's namespace on the shared stack.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	stack *localstack.Stack
	start time.Time
}

// newScenario creates the scenario's namespace, served by the extension ext, and
// collects the namespace's objects into the artifacts when the test ends.
func newScenario(t *testing.T, ns, ext string) *scenario {
	t.Helper()
	if suite.stack == nil {
		t.Fatal("stack not started")
	}
	s := &scenario{t: t, ctx: suite.ctx, ns: ns, stack: suite.stack, start: time.Now()}
	if err := s.stack.CreateNamespace(s.ctx, ns, map[string]string{extensionLabel: ext, inplacev1.NamespaceEnabledLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.dump()
		t.Logf("EVIDENCE %s: scenario wall time %s", t.Name(), time.Since(s.start).Round(time.Second))
	})
	return s
}

func (s *scenario) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("[%s +%s] "+format, append([]any{s.ns, time.Since(s.start).Round(100 * time.Millisecond)}, args...)...)
}

// eventually polls check every interval until it returns nil or timeout passes.
func (s *scenario) eventually(timeout time.Duration, what string, check func() error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, last)
		case <-time.After(time.Second):
		}
	}
}

func (s *scenario) machines(cluster string) []clusterv1.Machine {
	s.t.Helper()
	list := &clusterv1.MachineList{}
	if err := s.stack.Client.List(s.ctx, list, client.InNamespace(s.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
		s.t.Fatalf("list machines: %v", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items
}

// machineIDs maps Machine name to UID.
func machineIDs(ms []clusterv1.Machine) map[string]types.UID {
	out := map[string]types.UID{}
	for _, m := range ms {
		out[m.Name] = m.UID
	}
	return out
}

func conditionTrue(conds []metav1.Condition, t string) error {
	for _, c := range conds {
		if c.Type == t {
			if c.Status == metav1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("%s=%s (%s: %s)", t, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("%s not set", t)
}

// waitClusterReady waits until the cluster has want Machines, each with a Node and
// Ready, and the Cluster is Available.
func (s *scenario) waitClusterReady(cluster string, want int) {
	s.t.Helper()
	s.eventually(clusterReadyAfter, "cluster "+cluster+" ready", func() error {
		ms := s.machines(cluster)
		if len(ms) != want {
			return fmt.Errorf("%d machines, want %d", len(ms), want)
		}
		for _, m := range ms {
			if m.Status.NodeRef.Name == "" {
				return fmt.Errorf("machine %s has no node", m.Name)
			}
			if err := conditionTrue(m.Status.Conditions, clusterv1.ReadyCondition); err != nil {
				return fmt.Errorf("machine %s: %w", m.Name, err)
			}
		}
		c := &clusterv1.Cluster{}
		if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
			return err
		}
		return conditionTrue(c.Status.Conditions, clusterv1.AvailableCondition)
	})
	s.logf("cluster %s ready with %d machines", cluster, want)
}

// waitRolledOut waits until every Machine runs version with a Node reporting it (when
// checkNodes), and the Cluster's ControlPlaneMachinesUpToDate and (with workers)
// WorkerMachinesUpToDate are True.
func (s *scenario) waitRolledOut(cluster, version string, want int, workers bool, timeout time.Duration, check func([]clusterv1.Machine) error) {
	s.t.Helper()
	s.eventually(timeout, "cluster "+cluster+" rolled out", func() error {
		ms := s.machines(cluster)
		if len(ms) != want {
			return fmt.Errorf("%d machines, want %d", len(ms), want)
		}
		for _, m := range ms {
			if m.Spec.Version != version {
				return fmt.Errorf("machine %s at %s", m.Name, m.Spec.Version)
			}
			if err := conditionTrue(m.Status.Conditions, clusterv1.MachineUpToDateCondition); err != nil {
				return fmt.Errorf("machine %s: %w", m.Name, err)
			}
		}
		if check != nil {
			if err := check(ms); err != nil {
				return err
			}
		}
		c := &clusterv1.Cluster{}
		if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
			return err
		}
		if err := conditionTrue(c.Status.Conditions, clusterv1.ClusterControlPlaneMachinesUpToDateCondition); err != nil {
			return err
		}
		if workers {
			return conditionTrue(c.Status.Conditions, clusterv1.ClusterWorkerMachinesUpToDateCondition)
		}
		return nil
	})
}

// machineWatch records every Machine event in the namespace from its start.
type machineWatch struct {
	mu      sync.Mutex
	added   []string
	deleted []string
	stop    func()
	// started and took time each Machine's in-place update (CAPI's
	// update-in-progress annotation from first seen to removed).
	started map[string]time.Time
	took    map[string]time.Duration
	// first is when each Machine first started updating.
	first map[string]time.Time
	// cpEnded is when the watch last saw a control-plane Machine's update end.
	cpEnded time.Time
}

// watchMachines starts watching Machines of the namespace; events for Machines that
// existed before (the initial ADDED list) are ignored.
func (s *scenario) watchMachines() *machineWatch {
	s.t.Helper()
	wc, err := client.NewWithWatch(s.stack.Config, client.Options{Scheme: s.stack.Client.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	existing := map[string]bool{}
	list := &clusterv1.MachineList{}
	if err := s.stack.Client.List(s.ctx, list, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	for _, m := range list.Items {
		existing[string(m.UID)] = true
	}
	w, err := wc.Watch(s.ctx, &clusterv1.MachineList{}, client.InNamespace(s.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		s.t.Fatal(err)
	}
	mw := &machineWatch{stop: w.Stop, started: map[string]time.Time{}, took: map[string]time.Duration{}, first: map[string]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(*clusterv1.Machine)
			if !ok {
				continue
			}
			mw.mu.Lock()
			_, controlPlane := m.Labels[clusterv1.MachineControlPlaneLabel]
			switch ev.Type {
			case watch.Added:
				if !existing[string(m.UID)] {
					mw.added = append(mw.added, m.Name)
				}
			case watch.Deleted:
				mw.deleted = append(mw.deleted, m.Name)
			}
			_, updating := m.Annotations[clusterv1.UpdateInProgressAnnotation]
			if t0, ok := mw.started[m.Name]; ok && !updating {
				mw.took[m.Name] = time.Since(t0)
				delete(mw.started, m.Name)
				if controlPlane {
					mw.cpEnded = time.Now()
				}
			} else if !ok && updating {
				mw.started[m.Name] = time.Now()
				if _, seen := mw.first[m.Name]; !seen {
					mw.first[m.Name] = time.Now()
				}
			}
			mw.mu.Unlock()
		}
	}()
	s.t.Cleanup(w.Stop)
	return mw
}

// controlPlaneFirst checks that no worker node was cordoned (cordons, the
// workload cluster's Nodes as seen since before the change) before the watch saw
// the last control-plane Machine's update end: a kubelet must not be newer than an
// API server it may reach, and Cluster API's topology controller starts the
// workers as soon as KubeadmControlPlane started on its last Machine (the
// coordinator holds them). workers are the worker nodes.
func (w *machineWatch) controlPlaneFirst(cordons *cordonWatch, workers []string) error {
	w.mu.Lock()
	cpEnded := w.cpEnded
	w.mu.Unlock()
	if cpEnded.IsZero() {
		return errors.New("no control-plane Machine's update was seen to end")
	}
	var early, never []string
	for _, n := range workers {
		switch at := cordons.firstCordoned(n); {
		case at.IsZero():
			never = append(never, n)
		case at.Before(cpEnded):
			early = append(early, fmt.Sprintf("%s (%s before)", n, cpEnded.Sub(at).Round(time.Millisecond)))
		}
	}
	if len(never) > 0 {
		return fmt.Errorf("worker nodes %v were never seen cordoned", never)
	}
	if len(early) > 0 {
		return fmt.Errorf("worker nodes %v were cordoned before the last control-plane Machine's update ended", early)
	}
	return nil
}

// durations returns how long each Machine's in-place update took, as seen by the watch.
func (w *machineWatch) durations() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for n, d := range w.took {
		out[n] = d.Round(100 * time.Millisecond).String()
	}
	return out
}

// startedBefore and startedAfter return the Machines whose first in-place update
// started before or after t.
func (w *machineWatch) startedBefore(t time.Time) []string {
	return w.startedWhen(func(s time.Time) bool { return s.Before(t) })
}

func (w *machineWatch) startedAfter(t time.Time) []string {
	return w.startedWhen(func(s time.Time) bool { return !s.Before(t) })
}

func (w *machineWatch) startedWhen(match func(time.Time) bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for n, s := range w.first {
		if match(s) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// updating returns the Machines currently updating in place.
func (w *machineWatch) updating() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for n := range w.started {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (w *machineWatch) result() (added, deleted []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.added...), append([]string(nil), w.deleted...)
}

// workloadClient returns a client for the workload cluster's in-memory API server.
func (s *scenario) workloadClient(kubeconfigPath string) client.WithWatch {
	s.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		s.t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s.stack.Client.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// followNodes calls observe with the workload cluster's Nodes as listed, then with
// the Node of every watch event from that list's resourceVersion, and again from a
// fresh list whenever the watch ends, until ctx is done. A poll can miss a node
// cordoned and uncordoned a fraction of a second later (the coordinator answers
// within one call); a watch sees both writes, each its own event.
func followNodes(ctx context.Context, wc client.WithWatch, observe func([]corev1.Node, time.Time)) {
	for ctx.Err() == nil {
		followNodesOnce(ctx, wc, observe)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func followNodesOnce(ctx context.Context, wc client.WithWatch, observe func([]corev1.Node, time.Time)) {
	nodes := &corev1.NodeList{}
	if err := wc.List(ctx, nodes); err != nil {
		return
	}
	observe(nodes.Items, time.Now())
	w, err := wc.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: nodes.ResourceVersion}})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		// Bookmarks carry a Node with only a resourceVersion; errors a Status.
		if n, ok := ev.Object.(*corev1.Node); ok && n.Name != "" && (ev.Type == watch.Added || ev.Type == watch.Modified) {
			observe([]corev1.Node{*n}, time.Now())
		}
	}
}

// nodeVersions returns the kubelet version every Node reports.
func (s *scenario) nodeVersions(wc client.Client) (map[string]string, error) {
	nodes := &corev1.NodeList{}
	if err := wc.List(s.ctx, nodes); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out, nil
}

// setTopologyFiles replaces the files variable of a topology cluster, optionally
// together with a version change (one rollout).
func (s *scenario) setTopology(cluster, version string, files []localstack.File) {
	s.t.Helper()
	c := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, c); err != nil {
		s.t.Fatal(err)
	}
	base := c.DeepCopy()
	if version != "" {
		c.Spec.Topology.Version = version
	}
	if files != nil {
		raw, err := jsonValue(files)
		if err != nil {
			s.t.Fatal(err)
		}
		for i := range c.Spec.Topology.Variables {
			if c.Spec.Topology.Variables[i].Name == "files" {
				c.Spec.Topology.Variables[i].Value = raw
			}
		}
	}
	if err := s.stack.Client.Patch(s.ctx, c, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch cluster topology: %v", err)
	}
}

// setKCPVersion moves a plain cluster's KubeadmControlPlane to version.
func (s *scenario) setKCPVersion(cluster, version string) {
	s.t.Helper()
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-control-plane"}, kcp); err != nil {
		s.t.Fatal(err)
	}
	base := kcp.DeepCopy()
	kcp.Spec.Version = version
	if err := s.stack.Client.Patch(s.ctx, kcp, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch KCP version: %v", err)
	}
}

// setMDVersion moves a plain cluster's MachineDeployment to version.
func (s *scenario) setMDVersion(cluster, version string) {
	s.t.Helper()
	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-md-0"}, md); err != nil {
		s.t.Fatal(err)
	}
	base := md.DeepCopy()
	md.Spec.Template.Spec.Version = version
	if err := s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch MachineDeployment version: %v", err)
	}
}

// dump writes the namespace's CAPI objects and Events as YAML into the artifacts.
func (s *scenario) dump() {
	dir := filepath.Join(suite.artifacts, strings.ReplaceAll(s.t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	kinds := []schema.GroupVersionKind{
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterList"},
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineList"},
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineSetList"},
		{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeploymentList"},
		{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlaneList"},
		{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigList"},
		{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta2", Kind: "DevMachineList"},
		{Group: "", Version: "v1", Kind: "EventList"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, k := range kinds {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(k)
		if err := s.stack.Client.List(ctx, l, client.InNamespace(s.ns)); err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := yaml.Marshal(l.Object["items"])
		if err != nil {
			continue
		}
		_ = os.WriteFile(filepath.Join(dir, strings.TrimSuffix(k.Kind, "List")+".yaml"), b, 0o644)
	}
	if err := errors.Join(errs...); err != nil {
		s.t.Logf("dump artifacts: %v", err)
	}
}

// inPlaceDone checks that no Machine carries CAPI's update-in-progress annotation and
// every KubeadmConfig of the cluster has file (when file.Path is set).
func (s *scenario) inPlaceDone(cluster string, file localstack.File) func([]clusterv1.Machine) error {
	return func(ms []clusterv1.Machine) error {
		for _, m := range ms {
			if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
				return fmt.Errorf("machine %s still updating in place", m.Name)
			}
		}
		if file.Path == "" {
			return nil
		}
		cfgs := &bootstrapv1.KubeadmConfigList{}
		if err := s.stack.Client.List(s.ctx, cfgs, client.InNamespace(s.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return err
		}
		if len(cfgs.Items) != len(ms) {
			return fmt.Errorf("%d KubeadmConfigs for %d machines", len(cfgs.Items), len(ms))
		}
		for _, c := range cfgs.Items {
			found := false
			for _, f := range c.Spec.Files {
				if f.Path == file.Path && f.Content == file.Content {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("KubeadmConfig %s lacks %s=%q", c.Name, file.Path, file.Content)
			}
		}
		return nil
	}
}
