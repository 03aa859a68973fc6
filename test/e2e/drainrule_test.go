//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// TestMachineDrainRuleSkipHonoured: a plain cluster (1 control plane, 1 worker)
// gets a worker-only files change. A pod bound to the worker's Node that no
// controller recreates first blocks the in-place drain (CAPI's Updating condition
// carries UpdateMachine's "pod <ns>/<name>: no controller recreates it"); then a
// MachineDrainRule with behavior Skip selecting that pod (for this cluster's
// Machines) is created and the update completes: the Machine keeps its name and UID,
// is up to date, no Machine is created or deleted, the worker's host has the new
// file, and the pod is still there, the same object (UID), bound to the same Node.
//
// The in-memory workload API server answers evictions with 404 (README.md), so an
// ordinary pod is never evicted here: the eviction half of a drain is covered by the
// coordinator's envtest suite (internal/coordinator/drain), not by this scenario.
func TestMachineDrainRuleSkipHonoured(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "drainrule", extOurs)
	const cluster = "mdr"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 2)
	agents := s.startAgents(cluster, 2)
	before := machineIDs(s.machines(cluster))
	var worker clusterv1.Machine
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			worker = m
		}
	}
	node := worker.Status.NodeRef.Name

	// The pod goes straight to the in-memory API server (a create, never a patch:
	// README.md), bound to the worker's Node, without an owner.
	wc := s.directWorkloadClient(cluster)
	const podNS, podName = "apps", "keep"
	if err := wc.Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNS}}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNS, Name: podName, Labels: map[string]string{"app": podName}},
		Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if err := wc.Create(s.ctx, pod); err != nil {
		t.Fatalf("create pod %s/%s on node %s: %v", podNS, podName, node, err)
	}
	if err := wc.Get(s.ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	podUID := pod.UID
	s.logf("pod %s/%s (UID %s, no controller) bound to worker node %s", podNS, podName, podUID, node)
	watch := s.watchMachines()

	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}
	s.setWorkerFiles(cluster, "v2", file)

	// Without a rule the pod is on the drain's list and blocks it.
	blocked := s.waitUpdatingMessage(worker.Name, "pod "+podNS+"/"+podName+": "+drain.ReasonNoController)
	s.logf("EVIDENCE without a MachineDrainRule the drain of %s is blocked: %s", node, blocked)

	rule := &clusterv1.MachineDrainRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "skip-keep"},
		Spec: clusterv1.MachineDrainRuleSpec{
			Drain: clusterv1.MachineDrainRuleDrainConfig{Behavior: clusterv1.MachineDrainRuleDrainBehaviorSkip},
			Machines: []clusterv1.MachineDrainRuleMachineSelector{{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
			}},
			Pods: []clusterv1.MachineDrainRulePodSelector{{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": podName}},
			}},
		},
	}
	if err := s.stack.Client.Create(s.ctx, rule); err != nil {
		t.Fatalf("create MachineDrainRule: %v", err)
	}
	s.logf("created MachineDrainRule %s/%s: behavior Skip for pods app=%s on Machines of cluster %s", s.ns, rule.Name, podName, cluster)

	s.waitInPlace(cluster, fromVersion, 2, true, before, localstack.File{}, agents)
	s.assertNoMachineChurn(watch)
	if got, err := hostFile(agents, node, file.Path); err != nil || got != file.Content {
		t.Fatalf("worker host %s: %s is %q (%v), want %q", node, file.Path, got, err, file.Content)
	}
	s.logf("EVIDENCE worker host %s has %s = %q", node, file.Path, file.Content)

	after := &corev1.Pod{}
	if err := wc.Get(s.ctx, client.ObjectKeyFromObject(pod), after); err != nil {
		t.Fatalf("the skipped pod %s/%s is gone after the update: %v", podNS, podName, err)
	}
	if after.UID != podUID || after.Spec.NodeName != node || after.DeletionTimestamp != nil {
		t.Fatalf("the skipped pod %s/%s after the update: UID %s (was %s), node %q (was %q), deletionTimestamp %v",
			podNS, podName, after.UID, podUID, after.Spec.NodeName, node, after.DeletionTimestamp)
	}
	s.logf("EVIDENCE MachineDrainRule Skip honoured: pod %s/%s still on node %s, same UID %s, not terminating; Machine %s updated in place",
		podNS, podName, node, podUID, worker.Name)
}

// directWorkloadClient returns a client for the cluster's in-memory workload API
// server from the cluster's kubeconfig Secret (not through the agents' proxy).
func (s *scenario) directWorkloadClient(cluster string) client.Client {
	s.t.Helper()
	kc, err := s.stack.WorkloadKubeconfig(s.ctx, s.ns, cluster)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		s.t.Fatal(fmt.Errorf("workload kubeconfig of %s: %w", cluster, err))
	}
	cfg.Timeout = 10 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: s.stack.Client.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}
