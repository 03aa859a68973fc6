//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

// The fleet scenario's cluster and the policy our extension runs with: the
// workers of MachineDeployment fleet-md-0 get a user-defined health gate (a
// command on the host) that fails while the host has fleetUnhealthyFile.
const (
	fleetNS             = "fleet"
	fleetCluster        = "fleet"
	fleetGate           = "fleet-e2e-health"
	fleetUnhealthyFile  = "etc/fleet-e2e/unhealthy"
	fleetGatePassWithin = 6
)

// e2ePolicy is the policy file of the shared extension (ourExtension): it only
// adds the fleet scenario's user gate, selected by namespace/cluster and
// MachineDeployment, so every other scenario runs as with the built-in policy.
var e2ePolicy = fmt.Sprintf(`gates:
- cluster: %[1]s/%[2]s
  machineSelector:
    matchLabels: {cluster.x-k8s.io/deployment-name: %[2]s-md-0}
  gates:
  - name: %[3]s
    command: ["/bin/sh", "-c", "test ! -e \"$CAPI_INPLACE_HOST_ROOT/%[4]s\""]
    passWithinSeconds: %[5]d
`, fleetNS, fleetCluster, fleetGate, fleetUnhealthyFile, fleetGatePassWithin)

// withE2EPolicy makes the extension spec run with e2ePolicy (written next to the
// artifacts, where a failed run can be read).
func withE2EPolicy(spec localstack.ExtensionSpec) (localstack.ExtensionSpec, error) {
	path := filepath.Join(suite.artifacts, "e2e-policy.yaml")
	if err := os.WriteFile(path, []byte(e2ePolicy), 0o644); err != nil {
		return spec, fmt.Errorf("write the e2e policy: %w", err)
	}
	args := spec.Args
	spec.Args = func(port int, certDir, kubeconfig string) []string {
		return append(args(port, certDir, kubeconfig), "--policy-file="+path)
	}
	return spec, nil
}

// TestFleetControls drives every fleet control of issue 17 §2-§4/§6 through the
// real stack, on one plain cluster: 1 control plane, MachineDeployment md-0 with
// worker A (the policy's user gate), md-1 with worker B. Each phase asserts on the
// API (Nodes of the workload cluster, Machines, the Cluster, Events):
//
//  1. budget: A's user gate fails, A is rolled back; then md-1 changes and B is
//     halted before cordon (never cordoned, no plan; CAPI's Updating condition
//     carries UpdateMachine's "halted: 1 of 1 failures allowed (node A ...)").
//  2. pause: the Cluster's paused annotation shows in `capi-inplace status`, in
//     the Cluster's InPlaceUpdate condition and as an Event.
//  3. window: with a closed window, resume and a retry of A (gate healthy again)
//     leave both held before cordon, the next opening in the message.
//  4. cancel: the window opens with B's agent down; B is cordoned with its plan,
//     one annotation cancels it (uncordoned, plan withdrawn, Cancelled); the retry
//     re-runs A to done.
//  5. B's agent returns, the cancel annotation goes: B runs to done.
//
// No Machine is created or deleted throughout.
func TestFleetControls(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, fleetNS, extOurs)
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: fleetCluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
	}); err != nil {
		t.Fatal(err)
	}
	mdA, mdB := fleetCluster+"-md-0", fleetCluster+"-md-1"
	s.cloneMachineDeployment(mdA, mdB)
	s.waitClusterReady(fleetCluster, 3)
	agents := s.startAgents(fleetCluster, 3)
	wc := s.workloadClient(agents.Kubeconfig())
	a, b := s.workerOf(fleetCluster, mdA), s.workerOf(fleetCluster, mdB)
	nodeA, nodeB := a.Status.NodeRef.Name, b.Status.NodeRef.Name
	before := machineIDs(s.machines(fleetCluster))
	watch := s.watchMachines()
	cordons, watchFrom := s.watchCordons(wc), time.Now()
	phase := time.Now()
	took := map[string]time.Duration{}
	done := func(name string) {
		took[name] = time.Since(phase).Round(time.Second)
		s.logf("EVIDENCE phase %s took %s", name, took[name])
		phase = time.Now()
	}

	// 1. Budget.
	if err := writeHostFile(agents, nodeA, fleetUnhealthyFile, ""); err != nil {
		t.Fatal(err)
	}
	fileA := localstack.File{Path: "/etc/capi-inplace-e2e/fleet-a", Content: "1"}
	s.addMDFile(mdA, fleetCluster+"-worker-a2", fileA)
	s.eventually(rolloutTimeout, "worker A ("+nodeA+") rolled back by its failing user gate", func() error {
		n := s.node(wc, nodeA)
		if st := n.Annotations[inplacev1.StateAnnotation]; st != "RolledBack" {
			return fmt.Errorf("node %s state %q", nodeA, st)
		}
		if n.Spec.Unschedulable {
			return fmt.Errorf("node %s still cordoned", nodeA)
		}
		_, err := s.machineEvent(a.Name, inplacev1.EventUpdateRolledBack)
		return err
	})
	st := s.nodeStatus(wc, nodeA)
	s.logf("EVIDENCE worker A %s rolled back: agent status reason %q message %q", nodeA, st.Reason, st.Message)
	if !strings.Contains(st.Message, fleetGate) {
		t.Fatalf("node %s rolled back, but not by the policy's gate %s: %+v", nodeA, fleetGate, st)
	}
	s.eventually(time.Minute, "the failure counted on the Cluster", func() error {
		fs, err := fleet.Decode(s.cluster(fleetCluster).Annotations[inplacev1.FleetStateAnnotation])
		if err != nil {
			return err
		}
		if len(fs.Failures) != 1 || fs.Failures[0].Node != nodeA {
			return fmt.Errorf("fleet record %+v", fs.Failures)
		}
		return nil
	})
	fileB := localstack.File{Path: "/etc/capi-inplace-e2e/fleet-b", Content: "1"}
	s.addMDFile(mdB, fleetCluster+"-worker-b2", fileB)
	halted := s.waitUpdatingMessage(b.Name, "halted: 1 of 1 failures allowed (node "+nodeA)
	s.assertHeldBeforeCordon(wc, cordons, nodeB, watchFrom, 5*time.Second)
	s.waitClusterCondition(fleetCluster, inplacev1.ReasonHalted, "")
	if _, err := s.clusterEvent(fleetCluster, inplacev1.EventUpdatesHalted); err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE budget: worker B %s halted before cordon: %q", nodeB, halted)
	done("budget")

	// 2. Pause, visible in status, the Cluster's condition and an Event.
	s.annotateCluster(fleetCluster, map[string]*string{inplacev1.PausedAnnotation: ptrTo("true")})
	paused := s.waitUpdatingMessage(b.Name, "cluster is paused for in-place updates")
	s.waitClusterCondition(fleetCluster, inplacev1.ReasonPaused, "")
	ev, err := s.clusterEvent(fleetCluster, inplacev1.EventUpdatesPaused)
	if err != nil {
		t.Fatal(err)
	}
	view := s.statusOf(fleetCluster, 3) // 3: worker A's plan rolled back
	if !view.Paused || view.Fleet.State != status.FleetPaused {
		t.Fatalf("capi-inplace status shows paused=%v fleet state %q, want paused", view.Paused, view.Fleet.State)
	}
	s.assertHeldBeforeCordon(wc, cordons, nodeB, watchFrom, 0)
	s.logf("EVIDENCE pause: hook %q; Event %s: %s; status paused=%v fleet %s: %s", paused, ev.Reason, ev.Message, view.Paused, view.Fleet.State, view.Fleet.Message)
	done("pause")

	// 3. A closed window holds every node before cordon: B after resume, A after
	// its retry (its gate is healthy again).
	windowFrom := time.Now()
	closedDay := windowFrom.UTC().Add(72 * time.Hour)
	closed := closedDay.Weekday().String()[:3] + " 00:00-24:00 UTC"
	nextOpening := time.Date(closedDay.Year(), closedDay.Month(), closedDay.Day(), 0, 0, 0, 0, time.UTC).Format(time.RFC3339)
	s.annotateCluster(fleetCluster, map[string]*string{
		inplacev1.PausedAnnotation: nil, inplacev1.ResumeAnnotation: ptrTo("true"),
		inplacev1.MaintenanceWindowsAnnotation: ptrTo(closed),
	})
	if err := os.Remove(filepath.Join(agents.HostRoot(nodeA), fleetUnhealthyFile)); err != nil {
		t.Fatal(err)
	}
	s.annotateMachine(a.Name, inplacev1.RetryAnnotation, ptrTo("true"))
	wantWindow := "maintenance window is closed; next opening " + nextOpening
	heldA := s.waitUpdatingMessage(a.Name, wantWindow)
	heldB := s.waitUpdatingMessage(b.Name, wantWindow)
	s.assertHeldBeforeCordon(wc, cordons, nodeA, windowFrom, 0)
	s.assertHeldBeforeCordon(wc, cordons, nodeB, watchFrom, 0)
	s.waitClusterCondition(fleetCluster, inplacev1.ReasonWindowClosed, nextOpening)
	if c := s.cluster(fleetCluster); c.Annotations[inplacev1.ResumeAnnotation] != "" || c.Annotations[inplacev1.FleetStateAnnotation] != "" {
		t.Fatalf("resume left the Cluster with %v", c.Annotations)
	}
	if _, ok := s.machine(a.Name).Annotations[inplacev1.RetryAnnotation]; ok {
		t.Fatalf("the retry annotation is still on Machine %s", a.Name)
	}
	s.logf("EVIDENCE window %q holds A: %q and B: %q", closed, heldA, heldB)
	done("window")

	// 4. Cancel: B's agent is down, so B's plan waits, published, on a cordoned node.
	agents.Kill(nodeB)
	s.annotateCluster(fleetCluster, map[string]*string{inplacev1.MaintenanceWindowsAnnotation: ptrTo("* 00:00-24:00 UTC")})
	s.eventually(time.Minute, "node "+nodeB+" cordoned with its plan", func() error {
		n := s.node(wc, nodeB)
		if !n.Spec.Unschedulable || n.Annotations[inplacev1.DesiredPlanAnnotation] == "" {
			return fmt.Errorf("node %s: unschedulable %v, plan %q", nodeB, n.Spec.Unschedulable, n.Annotations[inplacev1.DesiredPlanAnnotation])
		}
		return nil
	})
	s.annotateMachine(b.Name, inplacev1.CancelAnnotation, ptrTo("true"))
	s.eventually(time.Minute, "B's update cancelled", func() error {
		n := s.node(wc, nodeB)
		if n.Spec.Unschedulable || n.Annotations[inplacev1.DesiredPlanAnnotation] != "" {
			return fmt.Errorf("node %s: unschedulable %v, plan %q", nodeB, n.Spec.Unschedulable, n.Annotations[inplacev1.DesiredPlanAnnotation])
		}
		c := meta.FindStatusCondition(s.machine(b.Name).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		if c == nil || c.Reason != inplacev1.ReasonCancelled {
			return fmt.Errorf("Machine %s InPlaceUpdate condition %+v", b.Name, c)
		}
		_, err := s.machineEvent(b.Name, inplacev1.EventUpdateCancelled)
		return err
	})
	if _, err := hostFile(agents, nodeB, fileB.Path); err == nil {
		t.Fatalf("cancelled node %s has %s", nodeB, fileB.Path)
	}
	s.logf("EVIDENCE cancel: node %s uncordoned, plan withdrawn, Machine %s InPlaceUpdateCancelled", nodeB, b.Name)
	// The retried A runs to done meanwhile.
	s.eventually(rolloutTimeout, "retried worker A done", func() error {
		m := s.machine(a.Name)
		if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
			return fmt.Errorf("Machine %s still updating", a.Name)
		}
		got, err := hostFile(agents, nodeA, fileA.Path)
		if err != nil {
			return fmt.Errorf("host %s: %w", nodeA, err)
		}
		if got != fileA.Content {
			return fmt.Errorf("host %s: %s = %q", nodeA, fileA.Path, got)
		}
		return nil
	})
	s.logf("EVIDENCE retry: worker A %s done, %s on its host", nodeA, fileA.Path)
	done("cancel+retry")

	// 5. B goes once its agent is back and the cancel annotation is removed.
	if err := agents.Restart(nodeB); err != nil {
		t.Fatal(err)
	}
	s.annotateMachine(b.Name, inplacev1.CancelAnnotation, nil)
	s.waitRolledOut(fleetCluster, fromVersion, 3, true, rolloutTimeout, func(ms []clusterv1.Machine) error {
		if err := sameMachines(before, ms); err != nil {
			return err
		}
		for _, m := range ms {
			if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
				return fmt.Errorf("machine %s still updating in place", m.Name)
			}
		}
		got, err := hostFile(agents, nodeB, fileB.Path)
		if err != nil {
			return fmt.Errorf("host %s: %w", nodeB, err)
		}
		if got != fileB.Content {
			return fmt.Errorf("host %s: %s = %q", nodeB, fileB.Path, got)
		}
		return nil
	})
	done("finish")
	s.assertNoMachineChurn(watch)
	s.logf("EVIDENCE fleet phases %v; cordons seen %v", took, cordons.seen())
}

// cloneMachineDeployment creates MachineDeployment to as a copy of from (its own
// selector and template labels), one replica.
func (s *scenario) cloneMachineDeployment(from, to string) {
	s.t.Helper()
	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: from}, md); err != nil {
		s.t.Fatal(err)
	}
	out := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: to, Labels: map[string]string{clusterv1.ClusterNameLabel: md.Spec.ClusterName}}}
	out.Spec = *md.Spec.DeepCopy()
	one := int32(1)
	out.Spec.Replicas = &one
	out.Spec.Selector.MatchLabels[clusterv1.MachineDeploymentNameLabel] = to
	out.Spec.Template.Labels[clusterv1.MachineDeploymentNameLabel] = to
	if err := s.stack.Client.Create(s.ctx, out); err != nil {
		s.t.Fatalf("create MachineDeployment %s: %v", to, err)
	}
}

// workerOf returns the one Machine of MachineDeployment md of cluster.
func (s *scenario) workerOf(cluster, md string) clusterv1.Machine {
	s.t.Helper()
	for _, m := range s.machines(cluster) {
		if m.Labels[clusterv1.MachineDeploymentNameLabel] == md {
			return m
		}
	}
	s.t.Fatalf("no Machine of MachineDeployment %s", md)
	return clusterv1.Machine{}
}

// addMDFile points MachineDeployment md at a copy of its KubeadmConfigTemplate,
// named tmplName, with file set (the entry of its path replaced, else appended): a
// KubeadmConfig change and nothing else (a template written from scratch drops fields
// such as format, which the planner refuses to change in place).
func (s *scenario) addMDFile(mdName, tmplName string, file localstack.File) {
	s.t.Helper()
	md := &clusterv1.MachineDeployment{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: mdName}, md); err != nil {
		s.t.Fatal(err)
	}
	cur := &unstructured.Unstructured{}
	cur.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	cur.SetKind("KubeadmConfigTemplate")
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: md.Spec.Template.Spec.Bootstrap.ConfigRef.Name}, cur); err != nil {
		s.t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(cur.Object, "spec", "template", "spec")
	if spec == nil {
		spec = map[string]any{}
	}
	files, _, _ := unstructured.NestedSlice(spec, "files")
	entry := map[string]any{"path": file.Path, "content": file.Content}
	i := slices.IndexFunc(files, func(f any) bool { m, ok := f.(map[string]any); return ok && m["path"] == file.Path })
	if i >= 0 {
		files[i] = entry
	} else {
		files = append(files, entry)
	}
	spec["files"] = files
	tmpl := &unstructured.Unstructured{}
	tmpl.SetAPIVersion("bootstrap.cluster.x-k8s.io/v1beta2")
	tmpl.SetKind("KubeadmConfigTemplate")
	tmpl.SetNamespace(s.ns)
	tmpl.SetName(tmplName)
	tmpl.Object["spec"] = map[string]any{"template": map[string]any{"spec": spec}}
	if err := s.stack.Client.Create(s.ctx, tmpl); err != nil {
		s.t.Fatal(err)
	}
	base := md.DeepCopy()
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = tmpl.GetName()
	if err := s.stack.Client.Patch(s.ctx, md, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch MachineDeployment %s bootstrap template: %v", mdName, err)
	}
	s.logf("MachineDeployment %s now uses KubeadmConfigTemplate %s (a copy of %s with %s = %q)", mdName, tmpl.GetName(), cur.GetName(), file.Path, file.Content)
}

func ptrTo(s string) *string { return &s }

func (s *scenario) node(wc client.Client, name string) *corev1.Node {
	s.t.Helper()
	n := &corev1.Node{}
	if err := wc.Get(s.ctx, client.ObjectKey{Name: name}, n); err != nil {
		s.t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

// nodeStatus decodes the agent's status annotation on a Node.
func (s *scenario) nodeStatus(wc client.Client, name string) protocol.NodeStatus {
	s.t.Helper()
	raw := s.node(wc, name).Annotations[inplacev1.StatusAnnotation]
	st, err := protocol.DecodeStatus(raw)
	if err != nil {
		s.t.Fatalf("node %s status %q: %v", name, raw, err)
	}
	return st
}

func (s *scenario) cluster(name string) *clusterv1.Cluster {
	s.t.Helper()
	c := &clusterv1.Cluster{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, c); err != nil {
		s.t.Fatal(err)
	}
	return c
}

// annotateCluster sets (nil: removes) annotations of the Cluster in one patch.
func (s *scenario) annotateCluster(name string, set map[string]*string) {
	s.t.Helper()
	c := s.cluster(name)
	base := c.DeepCopy()
	applyAnnotations(c, set)
	if err := s.stack.Client.Patch(s.ctx, c, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("annotate Cluster %s: %v", name, err)
	}
	s.logf("Cluster %s annotated %s", name, describe(set))
}

func (s *scenario) annotateMachine(name, key string, value *string) {
	s.t.Helper()
	m := s.machine(name)
	base := m.DeepCopy()
	applyAnnotations(m, map[string]*string{key: value})
	if err := s.stack.Client.Patch(s.ctx, m, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("annotate Machine %s: %v", name, err)
	}
	s.logf("Machine %s annotated %s", name, describe(map[string]*string{key: value}))
}

func applyAnnotations(o client.Object, set map[string]*string) {
	ann := o.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	for k, v := range set {
		if v == nil {
			delete(ann, k)
		} else {
			ann[k] = *v
		}
	}
	o.SetAnnotations(ann)
}

func describe(set map[string]*string) string {
	var parts []string
	for k, v := range set {
		if v == nil {
			parts = append(parts, k+"-")
		} else {
			parts = append(parts, k+"="+*v)
		}
	}
	return strings.Join(parts, " ")
}

// waitUpdatingMessage waits until CAPI's Updating condition on the Machine (which
// carries UpdateMachine's in-progress message) contains want, and returns it.
func (s *scenario) waitUpdatingMessage(machine, want string) string {
	s.t.Helper()
	var msg string
	s.eventually(time.Minute, "Machine "+machine+" Updating: "+want, func() error {
		c := meta.FindStatusCondition(s.machine(machine).Status.Conditions, clusterv1.MachineUpdatingCondition)
		if c == nil {
			return fmt.Errorf("no Updating condition")
		}
		msg = c.Message
		if !strings.Contains(c.Message, want) {
			return fmt.Errorf("Updating %s: %q", c.Reason, c.Message)
		}
		return nil
	})
	return msg
}

// waitClusterCondition waits for the Cluster's InPlaceUpdate condition to have
// reason and a message containing msg.
func (s *scenario) waitClusterCondition(cluster, reason, msg string) {
	s.t.Helper()
	s.eventually(time.Minute, "Cluster "+cluster+" InPlaceUpdate "+reason, func() error {
		c := meta.FindStatusCondition(s.cluster(cluster).Status.Conditions, inplacev1.InPlaceUpdateCondition)
		if c == nil || c.Reason != reason || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
}

// clusterEvent returns the newest Event with reason on the Cluster.
func (s *scenario) clusterEvent(name, reason string) (corev1.Event, error) {
	evs := &corev1.EventList{}
	if err := s.stack.Client.List(s.ctx, evs, client.InNamespace(s.ns)); err != nil {
		return corev1.Event{}, err
	}
	var found *corev1.Event
	for i, e := range evs.Items {
		if e.InvolvedObject.Kind == "Cluster" && e.InvolvedObject.Name == name && e.Reason == reason {
			if found == nil || eventTime(e).After(eventTime(*found)) {
				found = &evs.Items[i]
			}
		}
	}
	if found == nil {
		return corev1.Event{}, fmt.Errorf("no %s Event on Cluster %s", reason, name)
	}
	return *found, nil
}

// statusOf runs `capi-inplace status -o json` on the scenario's namespace and
// returns the cluster's view; wantExit is the exit code expected (3: a node's
// plan failed).
func (s *scenario) statusOf(cluster string, wantExit int) status.ClusterView {
	s.t.Helper()
	cmd := exec.CommandContext(s.ctx, filepath.Join(s.stack.BinDir(), "capi-inplace"), "status", "-n", s.ns, "-o", "json", "--kubeconfig", s.stack.KubeconfigPath)
	out, err := cmd.Output()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		s.t.Fatalf("capi-inplace status: %v\n%s", err, out)
	}
	if code != wantExit {
		s.t.Fatalf("capi-inplace status exited %d, want %d: %v\n%s", code, wantExit, err, out)
	}
	var r status.Report
	if err := json.Unmarshal(out, &r); err != nil {
		s.t.Fatalf("capi-inplace status output: %v\n%s", err, out)
	}
	for _, c := range r.Clusters {
		if c.Name == cluster {
			return c
		}
	}
	s.t.Fatalf("capi-inplace status shows no cluster %s:\n%s", cluster, out)
	return status.ClusterView{}
}

// cordonWatch remembers when each node of the workload cluster was last seen
// cordoned.
type cordonWatch struct {
	mu   sync.Mutex
	last map[string]time.Time
	// first is when each node was first seen cordoned.
	first map[string]time.Time
}

// watchCordons follows the workload cluster's Nodes by a watch (followNodes) until
// the test ends, so that a cordon lifted within the same second is seen too.
func (s *scenario) watchCordons(wc client.WithWatch) *cordonWatch {
	w := &cordonWatch{last: map[string]time.Time{}, first: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		followNodes(ctx, wc, w.observe)
	}()
	return w
}

func (w *cordonWatch) observe(nodes []corev1.Node, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range nodes {
		if n.Spec.Unschedulable {
			w.last[n.Name] = now
			if _, ok := w.first[n.Name]; !ok {
				w.first[n.Name] = now
			}
		}
	}
}

func (w *cordonWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for n := range w.last {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// firstCordoned is when node was first seen cordoned (zero if never).
func (w *cordonWatch) firstCordoned(node string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first[node]
}

// cordonedSince reports whether node was seen cordoned at or after t.
func (w *cordonWatch) cordonedSince(node string, t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.last[node]
	return ok && !last.Before(t)
}

// assertHeldBeforeCordon checks, now and for the next hold duration, that node was
// not cordoned at any time since since and carries no plan.
func (s *scenario) assertHeldBeforeCordon(wc client.Client, w *cordonWatch, node string, since time.Time, hold time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(hold)
	for {
		n := s.node(wc, node)
		if w.cordonedSince(node, since) || n.Spec.Unschedulable {
			s.t.Fatalf("node %s was cordoned while its update was held (since %s)", node, since.Format(time.RFC3339))
		}
		if p := n.Annotations[inplacev1.DesiredPlanAnnotation]; p != "" {
			s.t.Fatalf("node %s got plan %s while its update was held", node, p)
		}
		if !time.Now().Before(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}
