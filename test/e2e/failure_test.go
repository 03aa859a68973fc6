//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// TestHealthGateFailureRollsBackAndHalts: the workers of a plain cluster (1 control
// plane, 3 workers, maxSurge 0, maxUnavailable 1) get a files change; the health
// gates of one worker fail. That node is rolled back and uncordoned, its Machine
// shows the cause (our Event), no other Machine starts updating after the failure,
// and no Machine is created or deleted.
func TestHealthGateFailureRollsBackAndHalts(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "healthgate", extOurs)
	const cluster = "gate"
	old := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "0"}
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 3, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{old},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 4)
	agents := s.startAgentsWith(cluster, 4, localstack.AgentOptions{GateTimeout: 20 * time.Second})
	before := machineIDs(s.machines(cluster))
	var workers []clusterv1.Machine
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			workers = append(workers, m)
		}
	}
	bad := workers[1]
	badNode := bad.Status.NodeRef.Name
	if err := writeHostFile(agents, badNode, ".sim/fail-gate", ""); err != nil {
		t.Fatal(err)
	}
	s.logf("armed failing health gates on worker %s (node %s)", bad.Name, badNode)
	watch := s.watchMachines()

	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}
	// What the host had before the update is what a rollback must leave (a simulated
	// host starts from the Node, not from bootstrap data, so the file may be absent).
	prevContent, prevErr := hostFile(agents, badNode, file.Path)
	s.setWorkerFiles(cluster, "v2", file)

	// The failing node reports RolledBack and its Machine gets our Event.
	wc := s.workloadClient(agents.Kubeconfig())
	var ev corev1.Event
	changed := time.Now()
	s.eventually(rolloutTimeout, "worker "+bad.Name+" rolled back with a visible cause", func() error {
		node := &corev1.Node{}
		if err := wc.Get(s.ctx, client.ObjectKey{Name: badNode}, node); err != nil {
			return err
		}
		if node.Annotations[inplacev1.DesiredPlanAnnotation] == "" && time.Since(changed) > 4*time.Minute {
			t.Fatalf("no plan published to node %s 4 minutes after the change; extension says:\n%s", badNode, extensionFailures(8))
		}
		if st := node.Annotations[inplacev1.StateAnnotation]; st != "RolledBack" {
			return fmt.Errorf("node %s state %q", badNode, st)
		}
		e, err := s.machineEvent(bad.Name, inplacev1.EventUpdateRolledBack)
		if err != nil {
			return err
		}
		ev = e
		return nil
	})
	failedAt := time.Now()
	s.logf("EVIDENCE failure cause on Machine %s: Event %s: %s", bad.Name, ev.Reason, ev.Message)

	// The node is uncordoned and its old file is back.
	s.eventually(time.Minute, "node "+badNode+" uncordoned", func() error {
		node := &corev1.Node{}
		if err := wc.Get(s.ctx, client.ObjectKey{Name: badNode}, node); err != nil {
			return err
		}
		if node.Spec.Unschedulable {
			return fmt.Errorf("node %s still cordoned", badNode)
		}
		return nil
	})
	content, err := hostFile(agents, badNode, file.Path)
	if content != prevContent || (err == nil) != (prevErr == nil) {
		t.Fatalf("rolled-back host %s: %s is %q (%v), want what it was before the update: %q (%v)", badNode, file.Path, content, err, prevContent, prevErr)
	}
	s.logf("EVIDENCE node %s uncordoned, %s back to its state before the update (%q, err %v)", badNode, file.Path, content, err)

	// The rollout halts: for 30 s no other Machine starts updating.
	updatingAtFailure := watch.updating()
	startedBefore := watch.startedBefore(failedAt)
	time.Sleep(30 * time.Second)
	startedAfter := watch.startedAfter(failedAt)
	s.logf("EVIDENCE rollout halted: updating at failure %v; started before failure %v; started in the 30 s after %v", updatingAtFailure, startedBefore, startedAfter)
	if len(startedAfter) > 0 {
		t.Fatalf("machines %v started updating after %s failed", startedAfter, bad.Name)
	}
	if err := sameMachines(before, s.machines(cluster)); err != nil {
		t.Fatal(err)
	}
	s.assertNoMachineChurn(watch)
	m := &clusterv1.Machine{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: bad.Name}, m); err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Status.Conditions {
		if c.Type == clusterv1.MachineUpdatingCondition || c.Type == inplacev1.InPlaceUpdateCondition {
			s.logf("EVIDENCE Machine %s condition %s=%s %s: %s", m.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

// setWorkerFiles points a plain cluster's MachineDeployment at a new
// KubeadmConfigTemplate (<cluster>-worker-<suffix>) holding file: a worker-only
// KubeadmConfig change.
func (s *scenario) setWorkerFiles(cluster, suffix string, file localstack.File) {
	s.t.Helper()
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	tmpl.SetKind("KubeadmConfigTemplate")
	tmpl.SetNamespace(s.ns)
	tmpl.SetName(cluster + "-worker-" + suffix)
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{
		"files": []any{map[string]any{"path": file.Path, "content": file.Content}},
	}}}
	if err := s.stack.Client.Create(s.ctx, tmpl); err != nil {
		s.t.Fatal(err)
	}
	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-md-0"}, md); err != nil {
		s.t.Fatal(err)
	}
	base := md.DeepCopy()
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = tmpl.GetName()
	if err := s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch MachineDeployment bootstrap template: %v", err)
	}
	s.logf("workers now use KubeadmConfigTemplate %s (%s = %q)", tmpl.GetName(), file.Path, file.Content)
}

// machineEvent returns the newest Event with reason on Machine name.
func (s *scenario) machineEvent(name, reason string) (corev1.Event, error) {
	evs := &corev1.EventList{}
	if err := s.stack.Client.List(s.ctx, evs, client.InNamespace(s.ns)); err != nil {
		return corev1.Event{}, err
	}
	var found []corev1.Event
	var seen []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Machine" && e.InvolvedObject.Name == name {
			seen = append(seen, e.Reason)
			if e.Reason == reason {
				found = append(found, e)
			}
		}
	}
	if len(found) == 0 {
		return corev1.Event{}, fmt.Errorf("no %s Event on Machine %s (seen %v)", reason, name, seen)
	}
	sort.Slice(found, func(i, j int) bool { return eventTime(found[i]).Before(eventTime(found[j])) })
	return found[len(found)-1], nil
}

func eventTime(e corev1.Event) time.Time {
	for _, t := range []metav1.Time{e.LastTimestamp, e.FirstTimestamp} {
		if !t.IsZero() {
			return t.Time
		}
	}
	return e.EventTime.Time
}

// TestDisableInPlaceUpdatesImmutableRollout: with disableInPlaceUpdates: "true" in
// the ExtensionConfig settings our extension covers nothing and CAPI's normal
// immutable rollout (new Machines, old ones deleted) completes, as upstream's own
// suites run extensions of our kind.
func TestDisableInPlaceUpdatesImmutableRollout(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "disabled", extOursDisabled)
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, "inplace"); err != nil {
		t.Fatal(err)
	}
	const cluster = "immutable"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Class: "inplace", Version: fromVersion,
		ControlPlaneReplicas: 3, WorkerReplicas: 1, MDMaxSurge: 1, MDMaxUnavailable: 0,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 4)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	start := time.Now()
	s.setTopology(cluster, toVersion, nil)
	s.waitRolledOut(cluster, toVersion, 4, true, rolloutTimeout, func(ms []clusterv1.Machine) error {
		for _, m := range ms {
			if _, old := before[m.Name]; old {
				return fmt.Errorf("old machine %s still there", m.Name)
			}
			if m.Status.NodeRef.Name == "" {
				return fmt.Errorf("machine %s has no node yet", m.Name)
			}
		}
		return nil
	})
	added, deleted := watch.result()
	s.logf("EVIDENCE immutable rollout with disableInPlaceUpdates=true took %s: created %v, deleted %v (before %v)",
		time.Since(start).Round(time.Second), added, deleted, keys(before))
	if len(deleted) < len(before) {
		t.Fatalf("only %v of %v deleted", deleted, keys(before))
	}
}

// TestRestartSafety: a plain control plane of 3 (maxSurge 0) moves one minor up; on
// the first node to reach restart-kubelet (after its kubeadm upgrade) the extension
// and that node's agent are killed and restarted. The rollout completes and every
// node ran kubeadm upgrade exactly once (simulated host's commands.log).
func TestRestartSafety(t *testing.T) {
	ext := ourExtension(t)
	s := newScenario(t, "restart", extOurs)
	const cluster = "restart"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion, ControlPlaneReplicas: 3,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 3)
	agents := s.startAgents(cluster, 3)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	const pause = ".sim/pause-before-restart-kubelet"
	for _, n := range agents.Nodes() {
		if err := writeHostFile(agents, n, pause, ""); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	s.setKCPVersion(cluster, toVersion)

	var paused string
	s.eventually(rolloutTimeout, "a node paused before restart-kubelet", func() error {
		for _, n := range agents.Nodes() {
			if _, err := hostFile(agents, n, ".sim/paused-at"); err == nil {
				paused = n
				return nil
			}
		}
		return fmt.Errorf("no node paused yet")
	})
	s.logf("node %s paused before restart-kubelet: killing the extension (pid %d) and its agent (pid %d)", paused, ext.Process().Pid(), agents.Process(paused).Pid())
	ext.Kill()
	agents.Kill(paused)
	time.Sleep(5 * time.Second)
	if err := ext.Start(s.ctx); err != nil {
		t.Fatal(err)
	}
	if err := agents.Restart(paused); err != nil {
		t.Fatal(err)
	}
	for _, n := range agents.Nodes() {
		_ = os.Remove(filepath.Join(agents.HostRoot(n), pause))
	}
	s.logf("extension and agent of %s restarted; pauses lifted", paused)

	s.waitInPlace(cluster, toVersion, 3, false, before, localstack.File{}, agents)
	s.assertNoMachineChurn(watch)
	// The upgrade itself: `kubeadm upgrade apply <version>` on the first control plane
	// (its preflight phase, run before it on its own, changes nothing) and `kubeadm
	// upgrade node` on the others.
	upgrades := countCommands(agents, "kubeadm upgrade apply v")
	for n, c := range countCommands(agents, "kubeadm upgrade node") {
		upgrades[n] += c
	}
	s.logf("EVIDENCE restart safety: rollout completed in %s; kubeadm upgrade runs per node %v", time.Since(start).Round(time.Second), upgrades)
	for n, c := range upgrades {
		if c != 1 {
			t.Errorf("node %s ran kubeadm upgrade %d times, want exactly once", n, c)
		}
	}
	// The agent's journal counts how often each action was started for the plan: the
	// killed node resumed after kubeadm-upgrade, so every action ran once everywhere.
	for _, n := range agents.Nodes() {
		j := findJournal(agents.HostRoot(n))
		if j == "" {
			t.Errorf("node %s: no journal under %s", n, agents.HostRoot(n))
			continue
		}
		b, err := os.ReadFile(j)
		if err != nil {
			t.Error(err)
			continue
		}
		var journal struct {
			Runs map[string]int `json:"runs"`
		}
		if err := json.Unmarshal(b, &journal); err != nil {
			t.Errorf("journal of %s: %v", n, err)
			continue
		}
		s.logf("EVIDENCE journal runs of %s: %v", n, journal.Runs)
		if len(journal.Runs) == 0 {
			t.Errorf("journal of %s counts no action runs", n)
		}
		for action, runs := range journal.Runs {
			if runs != 1 {
				t.Errorf("node %s: action %s ran %d times, want once", n, action, runs)
			}
		}
	}
}

// findJournal returns the agent's journal file under a simulated host, if any.
func findJournal(root string) string {
	var found string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "journal.json" {
			found = p
		}
		return nil
	})
	return found
}
