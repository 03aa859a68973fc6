//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// extDeadline is the deadline scenario's own extension: its policy gives the
// applying phase a deadline short enough for a test.
const (
	extDeadline     = "capi-inplace-deadline"
	applyingSeconds = 20
)

// TestSilentAgentPastDeadline: a worker, watched by a MachineHealthCheck, whose agent
// dies half-way through applying its plan and does not come back. Past the policy's applying deadline the update fails
// honestly: Cluster API's hook is answered Failure, the Machine's InPlaceUpdate
// condition and an Event say InPlaceUpdateDeadlineExceeded, the node stays cordoned
// with the cause on it (the agent may have changed it half-way), and the
// MachineHealthCheck hold the coordinator set at cordon is released, so that
// remediation can replace a node that cannot finish by itself. When the agent comes
// back after all and commits, its verdict wins: the node is uncordoned and the
// rollout completes, with no Machine created or deleted.
func TestSilentAgentPastDeadline(t *testing.T) {
	t.Parallel()
	requireBinary(t)
	startExtensionWithPolicy(t, extDeadline, fmt.Sprintf("deadlines: {applyingSeconds: %d}\n", applyingSeconds))
	s := newScenario(t, "deadline", extDeadline)
	const cluster = "deadline"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 1, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 2)
	agents := s.startAgents(cluster, 2)
	wc := s.workloadClient(agents.Kubeconfig())
	md := cluster + "-md-0"
	worker := s.workerOf(cluster, md)
	node := worker.Status.NodeRef.Name
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	// A MachineHealthCheck over the workers, the coordinator's reason to hold
	// remediation during the update. Its timeouts are long: the simulated node stays
	// Ready, so the released hold must not turn into a replacement here.
	s.healthCheckWorkers(cluster, md, worker.Name, 10*time.Minute)

	// The agent stops before it writes the file, its plan taken and the node cordoned.
	const pause = ".sim/pause-before-write-files"
	if err := writeHostFile(agents, node, pause, ""); err != nil {
		t.Fatal(err)
	}
	file := localstack.File{Path: "/etc/capi-inplace-e2e/deadline", Content: "1"}
	s.addMDFile(md, cluster+"-worker-deadline", file)
	s.eventually(rolloutTimeout, "the worker's agent paused before write-files", func() error {
		_, err := hostFile(agents, node, ".sim/paused-at")
		return err
	})
	var held clusterv1.Machine
	s.eventually(time.Minute, "the remediation hold on the updating Machine", func() error {
		held = *s.machine(worker.Name)
		if held.Annotations[clusterv1.MachineSkipRemediationAnnotation] == "" {
			return fmt.Errorf("Machine %s: no %s", worker.Name, clusterv1.MachineSkipRemediationAnnotation)
		}
		return nil
	})
	agents.Kill(node)
	silent := time.Now()
	s.logf("agent of %s killed while applying; the applying deadline is %d s", node, applyingSeconds)

	s.eventually(3*time.Minute, "the update failed past its deadline", func() error {
		m := s.machine(worker.Name)
		c := meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition)
		if c == nil || c.Reason != inplacev1.ReasonDeadlineExceeded {
			return fmt.Errorf("Machine %s InPlaceUpdate condition %+v", worker.Name, c)
		}
		_, err := s.machineEvent(worker.Name, inplacev1.EventDeadlineExceeded)
		return err
	})
	s.logf("EVIDENCE deadline exceeded %s after the agent fell silent", time.Since(silent).Round(time.Second))
	if d := time.Since(silent); d < applyingSeconds*time.Second {
		t.Fatalf("the update failed %s after the agent fell silent, before its %d s deadline", d, applyingSeconds)
	}
	n := s.node(wc, node)
	if !n.Spec.Unschedulable || n.Annotations[inplacev1.DeadlineExceededAnnotation] == "" {
		t.Fatalf("node %s past its deadline: cordoned %v, %s %q; want cordoned with the cause", node,
			n.Spec.Unschedulable, inplacev1.DeadlineExceededAnnotation, n.Annotations[inplacev1.DeadlineExceededAnnotation])
	}
	s.eventually(time.Minute, "the remediation hold released", func() error {
		if v, ok := s.machine(worker.Name).Annotations[clusterv1.MachineSkipRemediationAnnotation]; ok {
			return fmt.Errorf("Machine %s still has %s=%q", worker.Name, clusterv1.MachineSkipRemediationAnnotation, v)
		}
		return nil
	})
	if _, err := hostFile(agents, node, file.Path); err == nil {
		t.Fatalf("node %s has %s although its agent stopped before writing it", node, file.Path)
	}
	s.logf("EVIDENCE node %s cordoned with %s=%q; skip-remediation released", node, inplacev1.DeadlineExceededAnnotation, n.Annotations[inplacev1.DeadlineExceededAnnotation])

	// The agent comes back and finishes the plan: its commit wins.
	if err := agents.Restart(node); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(agents.HostRoot(node), pause)); err != nil {
		t.Fatal(err)
	}
	s.waitDoneInPlace(cluster, 2, before, agents, node, file)
	if n := s.node(wc, node); n.Spec.Unschedulable || n.Annotations[inplacev1.DeadlineExceededAnnotation] != "" {
		t.Fatalf("node %s after its agent committed: cordoned %v, %s %q", node, n.Spec.Unschedulable,
			inplacev1.DeadlineExceededAnnotation, n.Annotations[inplacev1.DeadlineExceededAnnotation])
	}
	s.assertNoMachineChurn(watch)
	s.logf("EVIDENCE the agent came back and committed: node %s uncordoned, the rollout completed on the same Machines", node)
}
