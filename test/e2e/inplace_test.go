//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

const rolloutTimeout = 10 * time.Minute

// TestClusterClassVersionAndFilesInPlace: a ClusterClass cluster of 3 control-plane
// (KCP maxSurge 0) and 2 worker machines (MachineDeployment maxSurge 0,
// maxUnavailable 1) moves one minor up and gets a files change in the same rollout.
// Every Machine keeps its name and UID, no Machine is created or deleted (watched),
// every Node reports the new kubelet version, every simulated host has the new file,
// and the Cluster's ControlPlaneMachinesUpToDate and WorkerMachinesUpToDate are True.
// No worker is cordoned for its new kubelet before the last control-plane Machine's
// update ended (the topology controller starts the workers earlier; the coordinator
// holds them: WaitingForControlPlane).
func TestClusterClassVersionAndFilesInPlace(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "cc-inplace", extOurs)
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, "inplace"); err != nil {
		t.Fatal(err)
	}
	const cluster = "cc"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Class: "inplace", Version: fromVersion,
		ControlPlaneReplicas: 3, WorkerReplicas: 2, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 5)
	agents := s.startAgents(cluster, 5)
	before := machineIDs(s.machines(cluster))
	var workers []string
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; !cp {
			workers = append(workers, m.Status.NodeRef.Name)
		}
	}
	cordons := s.watchCordons(s.workloadClient(agents.Kubeconfig()))
	watch := s.watchMachines()

	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}
	roundStart := time.Now()
	s.setTopology(cluster, toVersion, []localstack.File{file})
	s.logf("changed topology: version %s -> %s and %s -> %q", fromVersion, toVersion, file.Path, file.Content)
	s.waitInPlace(cluster, toVersion, 5, true, before, file, agents)
	round := time.Since(roundStart)
	s.assertNoMachineChurn(watch)
	if err := watch.controlPlaneFirst(cordons, workers); err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE round: ClusterClass in-place round (version %s -> %s + files, 3 CP + 2 workers) took %s; per machine %v",
		fromVersion, toVersion, round.Round(time.Second), watch.durations())

	// The same round as TestUpstreamFakeExtensionBaseline (files only), for comparison.
	watch2 := s.watchMachines()
	file2 := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "2"}
	roundStart = time.Now()
	s.setTopology(cluster, "", []localstack.File{file2})
	s.waitInPlace(cluster, toVersion, 5, true, before, file2, agents)
	s.assertNoMachineChurn(watch2)
	s.logf("EVIDENCE round: ClusterClass in-place round (files only, 3 CP + 2 workers; compare with the baseline) took %s; per machine %v",
		time.Since(roundStart).Round(time.Second), watch2.durations())
}

// TestPlainClusterVersionInPlaceThroughAPIOutage: a plain cluster (KubeadmControlPlane
// 3 replicas, maxSurge 0, plus a MachineDeployment of 3 workers, maxSurge 0,
// maxUnavailable 2) moves one minor up, control plane first, then workers. One
// control-plane node loses its connection to the workload API for 30 s during its
// kubeadm step (the simulated host's api-outage-seconds fault) and still completes.
func TestPlainClusterVersionInPlaceThroughAPIOutage(t *testing.T) {
	t.Parallel()
	ourExtension(t)
	s := newScenario(t, "plain-inplace", extOurs)
	const cluster = "plain"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Version: fromVersion,
		ControlPlaneReplicas: 3, WorkerReplicas: 3, MDMaxSurge: 0, MDMaxUnavailable: 2,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 6)
	agents := s.startAgents(cluster, 6)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()

	var outageNode string
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			outageNode = m.Status.NodeRef.Name
			break
		}
	}
	if err := writeHostFile(agents, outageNode, ".sim/api-outage-seconds", "30"); err != nil {
		t.Fatal(err)
	}
	s.logf("armed a 30 s API outage on control-plane node %s for its kubeadm step", outageNode)

	roundStart := time.Now()
	s.setKCPVersion(cluster, toVersion)
	failing := s.failFastOnHookFailure()
	s.eventually(rolloutTimeout, "control plane at "+toVersion, func() error {
		ms := s.machines(cluster)
		failing(ms)
		for _, m := range ms {
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
				if m.Spec.Version != toVersion {
					return fmt.Errorf("machine %s at %s", m.Name, m.Spec.Version)
				}
				if err := conditionTrue(m.Status.Conditions, clusterv1.MachineUpToDateCondition); err != nil {
					return fmt.Errorf("machine %s: %w", m.Name, err)
				}
			}
		}
		return nil
	})
	cpDone := time.Since(roundStart)
	s.setMDVersion(cluster, toVersion)
	s.waitInPlace(cluster, toVersion, 6, true, before, localstack.File{}, agents)
	round := time.Since(roundStart)
	s.assertNoMachineChurn(watch)

	done, err := hostFile(agents, outageNode, ".sim/api-outage-seconds.done")
	downUntil, _ := hostFile(agents, outageNode, ".sim/api-down-until")
	if err != nil {
		t.Fatalf("the API outage on %s never started (no .sim/api-outage-seconds.done): %v", outageNode, err)
	}
	s.logf("EVIDENCE outage: node %s had its 30 s API outage (armed %q, API down until %s) and completed the upgrade", outageNode, trim(done), trim(downUntil))
	s.logf("EVIDENCE round: plain-cluster in-place round (version %s -> %s, 3 CP then 3 workers) took %s (control plane %s); per machine %v",
		fromVersion, toVersion, round.Round(time.Second), cpDone.Round(time.Second), watch.durations())
}

// waitInPlace waits for an in-place rollout to finish and asserts its outcome: the
// same Machines (names and UIDs), all at version and up to date, every Node reporting
// version, file (if any) in every KubeadmConfig and on every simulated host.
func (s *scenario) waitInPlace(cluster, version string, want int, workers bool, before map[string]typesUID, file localstack.File, agents *localstack.Agents) {
	s.t.Helper()
	done := s.inPlaceDone(cluster, file)
	nodes := s.nodesAt(agents.Kubeconfig(), version)
	failing := s.failFastOnHookFailure()
	s.waitRolledOut(cluster, version, want, workers, rolloutTimeout, func(ms []clusterv1.Machine) error {
		failing(ms)
		if err := sameMachines(before, ms); err != nil {
			return err
		}
		if err := done(ms); err != nil {
			return err
		}
		if err := nodes(); err != nil {
			return err
		}
		if file.Path != "" {
			return hostsHave(agents, file)()
		}
		return nil
	})
	s.logf("EVIDENCE machines kept name and UID: %v", before)
	vs, _ := s.nodeVersions(s.workloadClient(agents.Kubeconfig()))
	s.logf("EVIDENCE node kubelet versions: %v", vs)
	if file.Path != "" {
		s.logf("EVIDENCE %s = %q on every simulated host %v", file.Path, file.Content, agents.Nodes())
	}
	s.logf("EVIDENCE Cluster %s: ControlPlaneMachinesUpToDate=True WorkerMachinesUpToDate=True (workers: %v)", cluster, workers)
}

// assertNoMachineChurn fails when a Machine was created or deleted since watch began.
func (s *scenario) assertNoMachineChurn(w *machineWatch) {
	s.t.Helper()
	added, deleted := w.result()
	s.logf("EVIDENCE machines created during rollout: %v; deleted: %v", added, deleted)
	if len(added) > 0 || len(deleted) > 0 {
		s.t.Fatalf("machines created %v / deleted %v during an in-place rollout", added, deleted)
	}
}

func trim(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	return s
}

// failFastOnHookFailure returns a check that ends the test when a Machine has shown
// CAPI's InPlaceUpdateFailed (UpdateMachine answering Failure) for 2 minutes: CAPI
// retries a Failure forever, so waiting for the full time-out only hides the cause.
// The extension's last failure lines go into the test output.
func (s *scenario) failFastOnHookFailure() func([]clusterv1.Machine) {
	since := map[string]time.Time{}
	return func(ms []clusterv1.Machine) {
		s.t.Helper()
		for _, m := range ms {
			failed := false
			for _, c := range m.Status.Conditions {
				if c.Type == clusterv1.MachineUpdatingCondition && c.Reason == clusterv1.MachineInPlaceUpdateFailedReason {
					failed = true
				}
			}
			if !failed {
				delete(since, m.Name)
				continue
			}
			if _, ok := since[m.Name]; !ok {
				since[m.Name] = time.Now()
			}
			if time.Since(since[m.Name]) > 2*time.Minute {
				s.t.Fatalf("Machine %s: UpdateMachine has failed for 2 minutes; extension says:\n%s", m.Name, extensionFailures(8))
			}
		}
	}
}

// extensionFailures returns the last n "Hook call failed" lines of our extension's log.
func extensionFailures(n int) string {
	if ours.ext == nil {
		return "(extension not started)"
	}
	b, err := os.ReadFile(ours.ext.Process().LogPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Hook call failed") || strings.Contains(l, "E1") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
