//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// mhcTimeout is the MachineHealthCheck's unhealthy timeout: far shorter than the
// NotReady window the scenario holds the node in during its update.
const mhcTimeout = 5 * time.Second

// TestMachineHealthCheckSparesUpdatingNode: a worker of a plain cluster (1 control
// plane, 1 worker) is updated in place under a MachineHealthCheck that remediates a
// node NotReady for 5 s. During the update the node is NotReady for 30 s (the agent
// is held before its health gates and the node's Ready condition set False, as a
// kubelet restart or reboot does): upstream's MachineHealthCheck does not remediate
// it, the Machine keeps its UID, no Machine is created or deleted, and after the
// update the skip-remediation annotation is gone. Control: the same NotReady node
// after the update is marked unhealthy by the same MachineHealthCheck.
func TestMachineHealthCheckSparesUpdatingNode(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "mhc", extOurs)
	const cluster = "mhc"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 2)
	agents := s.startAgents(cluster, 2)
	var worker clusterv1.Machine
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			worker = m
		}
	}
	node := worker.Status.NodeRef.Name
	wc := s.workloadClient(agents.Kubeconfig())

	mhc := s.healthCheckWorkers(cluster, cluster+"-md-0", worker.Name, mhcTimeout)
	s.logf("EVIDENCE MachineHealthCheck %s (Ready False/Unknown for %s) reports worker %s healthy", mhc.Name, mhcTimeout, worker.Name)

	// Hold the agent before its health gates, so that the update owns the node for
	// as long as the scenario keeps it NotReady.
	if err := writeHostFile(agents, node, ".sim/pause-before-gates", ""); err != nil {
		t.Fatal(err)
	}
	watch := s.watchMachines()
	before := machineIDs(s.machines(cluster))
	file := localstack.File{Path: "/etc/capi-inplace-e2e/mhc", Content: "1"}
	s.addWorkerFile(cluster, "v2", file)
	s.eventually(rolloutTimeout, "the agent on "+node+" held before its gates", func() error {
		_, err := hostFile(agents, node, ".sim/paused-at")
		return err
	})
	m := s.machine(worker.Name)
	if m.Annotations[clusterv1.MachineSkipRemediationAnnotation] == "" || m.Annotations[inplacev1.RemediationHeldByAnnotation] == "" {
		t.Fatalf("Machine %s is being updated in place but carries no skip-remediation of ours: %v", m.Name, m.Annotations)
	}
	s.logf("EVIDENCE Machine %s during its update: %s=%q %s=%q", m.Name,
		clusterv1.MachineSkipRemediationAnnotation, m.Annotations[clusterv1.MachineSkipRemediationAnnotation],
		inplacev1.RemediationHeldByAnnotation, m.Annotations[inplacev1.RemediationHeldByAnnotation])

	notReadyAt := time.Now()
	s.setNodeReady(wc, node, corev1.ConditionFalse)
	const window = 6 * mhcTimeout
	for time.Since(notReadyAt) < window {
		m := s.machine(worker.Name)
		if m.UID != worker.UID || !m.DeletionTimestamp.IsZero() {
			t.Fatalf("Machine %s was remediated during its in-place update (UID %s -> %s, deleting %v)", worker.Name, worker.UID, m.UID, !m.DeletionTimestamp.IsZero())
		}
		if c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition); c != nil {
			t.Fatalf("Machine %s marked for remediation during its in-place update: %s %s: %s", m.Name, c.Type, c.Reason, c.Message)
		}
		time.Sleep(time.Second)
	}
	s.logf("EVIDENCE node %s NotReady for %s under a %s MachineHealthCheck timeout: Machine %s not remediated (UID %s)", node, window, mhcTimeout, worker.Name, worker.UID)

	// The node comes back and the update finishes.
	s.setNodeReady(wc, node, corev1.ConditionTrue)
	if err := os.Remove(filepath.Join(agents.HostRoot(node), ".sim/pause-before-gates")); err != nil {
		t.Fatal(err)
	}
	s.waitDoneInPlace(cluster, 2, before, agents, node, file)
	s.assertNoMachineChurn(watch)
	m = s.machine(worker.Name)
	if _, ok := m.Annotations[clusterv1.MachineSkipRemediationAnnotation]; ok {
		t.Fatalf("Machine %s still carries %s after its update", m.Name, clusterv1.MachineSkipRemediationAnnotation)
	}
	if _, ok := m.Annotations[inplacev1.RemediationHeldByAnnotation]; ok {
		t.Fatalf("Machine %s still carries %s after its update", m.Name, inplacev1.RemediationHeldByAnnotation)
	}
	s.logf("EVIDENCE Machine %s after its update: UID %s kept, no skip-remediation", m.Name, m.UID)

	// Control: the MachineHealthCheck does act on this node outside an update.
	s.setNodeReady(wc, node, corev1.ConditionFalse)
	s.eventually(time.Minute, "MachineHealthCheck marking the NotReady worker unhealthy outside an update", func() error {
		c := meta.FindStatusCondition(s.machine(worker.Name).Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
		if c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("condition %s: %v", clusterv1.MachineHealthCheckSucceededCondition, c)
		}
		return nil
	})
	s.logf("EVIDENCE control: outside an update the same MachineHealthCheck marks Machine %s unhealthy", worker.Name)
	_ = s.stack.Client.Delete(s.ctx, mhc)
}

// machine reads one Machine of the scenario's namespace.
func (s *scenario) machine(name string) *clusterv1.Machine {
	s.t.Helper()
	m := &clusterv1.Machine{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, m); err != nil {
		s.t.Fatal(err)
	}
	return m
}

// setNodeReady sets the Node's Ready condition as a kubelet going down (or coming
// back) would; the in-memory API server takes status in a patch of the object.
func (s *scenario) setNodeReady(wc client.Client, name string, status corev1.ConditionStatus) {
	s.t.Helper()
	s.eventually(30*time.Second, "node "+name+" Ready="+string(status), func() error {
		n := &corev1.Node{}
		if err := wc.Get(s.ctx, client.ObjectKey{Name: name}, n); err != nil {
			return err
		}
		base := n.DeepCopy()
		now := metav1.Now()
		found := false
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status, n.Status.Conditions[i].LastTransitionTime, n.Status.Conditions[i].Reason = status, now, "E2ESimulated"
				found = true
			}
		}
		if !found {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: status, LastTransitionTime: now, Reason: "E2ESimulated"})
		}
		return wc.Patch(s.ctx, n, client.MergeFrom(base))
	})
}

// addWorkerFile points a plain cluster's MachineDeployment at a copy of its
// KubeadmConfigTemplate (<cluster>-worker-<suffix>) with file added: a worker-only
// KubeadmConfig change, and nothing else (a template written from scratch drops
// fields such as format, which the planner refuses to change in place).
func (s *scenario) addWorkerFile(cluster, suffix string, file localstack.File) {
	s.t.Helper()
	s.addMDFile(cluster+"-md-0", cluster+"-worker-"+suffix, file)
}

// healthCheckWorkers creates a MachineHealthCheck over MachineDeployment md's Machines
// that remediates a node NotReady for timeout, and waits until it watches worker.
func (s *scenario) healthCheckWorkers(cluster, md, worker string, timeout time.Duration) *clusterv1.MachineHealthCheck {
	s.t.Helper()
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-workers"},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: cluster,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md}},
			Checks: clusterv1.MachineHealthCheckChecks{
				NodeStartupTimeoutSeconds: ptr.To[int32](600),
				UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{
					{Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To(int32(timeout / time.Second))},
					{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, TimeoutSeconds: ptr.To(int32(timeout / time.Second))},
				},
			},
		},
	}
	if err := s.stack.Client.Create(s.ctx, mhc); err != nil {
		s.t.Fatal(err)
	}
	s.eventually(2*time.Minute, "MachineHealthCheck watching worker "+worker, func() error {
		return conditionTrue(s.machine(worker).Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition)
	})
	return mhc
}

// waitDoneInPlace waits until the cluster's want Machines are the ones of before,
// at fromVersion, none updating in place, and node's host carries file.
func (s *scenario) waitDoneInPlace(cluster string, want int, before map[string]types.UID, agents *localstack.Agents, node string, file localstack.File) {
	s.t.Helper()
	s.waitRolledOut(cluster, fromVersion, want, true, rolloutTimeout, func(ms []clusterv1.Machine) error {
		if err := sameMachines(before, ms); err != nil {
			return err
		}
		for _, m := range ms {
			if _, ok := m.Annotations[clusterv1.UpdateInProgressAnnotation]; ok {
				return fmt.Errorf("machine %s still updating in place", m.Name)
			}
		}
		got, err := hostFile(agents, node, file.Path)
		if err != nil {
			return fmt.Errorf("host %s: %s: %w", node, file.Path, err)
		}
		if got != file.Content {
			return fmt.Errorf("host %s: %s is %q", node, file.Path, got)
		}
		return nil
	})
}
