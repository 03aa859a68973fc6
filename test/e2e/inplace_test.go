//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

const rolloutTimeout = 10 * time.Minute

// pauseBeforeGates is the simulated host's file that holds its agent before the
// health gates, until the file is removed (internal/agent/simhost): the node's
// kubelet already reports the new version, the Machine's update is not over and
// can still fail and roll the node back to the old control plane.
//
// That is where the topology controller moves the workers: KubeadmControlPlane
// reports its Machines' versions from their nodes' kubelets, so once the last
// control-plane node's kubelet reports the new version the control plane counts as
// upgraded, however far its update is. A pause before the kubeadm upgrade (old
// kubelet) holds the workers back in Cluster API itself and tests nothing. On
// real nodes the third control plane got there when it lost power during
// `kubeadm upgrade node` and its kubelet came back as the new binary.
const pauseBeforeGates = ".sim/pause-before-gates"

// lastControlPlaneHeldAfterWorkersMove is how long the last control-plane node
// stays paused once the topology controller has moved a worker to the new
// version. A real node's update lasts minutes; a simulated one is done in a
// second, before the workers start, so without the pause the order is never
// tested. A worker let through would be cordoned within a few seconds of its
// update starting, and the coordinator's hold shows within one UpdateMachine call.
const lastControlPlaneHeldAfterWorkersMove = 30 * time.Second

// TestClusterClassVersionAndFilesInPlace: a ClusterClass cluster of 3 control-plane
// (KCP maxSurge 0) and 2 worker machines (MachineDeployment maxSurge 0,
// maxUnavailable 1) moves one minor up and gets a files change in the same rollout.
// Every Machine keeps its name and UID, no Machine is created or deleted (watched),
// every Node reports the new kubelet version, every simulated host has the new file,
// and the Cluster's ControlPlaneMachinesUpToDate and WorkerMachinesUpToDate are True.
// No worker is cordoned for its new kubelet before the last control-plane Machine's
// update ended: the last control-plane node's agent is paused before its health
// gates (pauseBeforeGates) while the topology controller starts the workers; a
// worker then shows InPlaceUpdate WaitingForControlPlane (the coordinator's hold)
// and stays uncordoned.
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
	var workers, controlPlane []string
	for _, m := range s.machines(cluster) {
		if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
			controlPlane = append(controlPlane, m.Status.NodeRef.Name)
		} else {
			workers = append(workers, m.Status.NodeRef.Name)
		}
	}
	cordons := s.watchCordons(s.workloadClient(agents.Kubeconfig()))
	watch := s.watchMachines()
	s.armPause(agents, controlPlane, pauseBeforeGates)

	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}
	roundStart := time.Now()
	s.setTopology(cluster, toVersion, []localstack.File{file})
	s.logf("changed topology: version %s -> %s and %s -> %q", fromVersion, toVersion, file.Path, file.Content)
	last := s.lastToPause(agents, controlPlane, pauseBeforeGates)
	lastPaused := time.Now()
	s.logf("last control-plane node %s paused before its health gates; the other control-plane nodes went on", last)
	held := s.workersWhileControlPlanePaused(cluster, toVersion, lastControlPlaneHeldAfterWorkersMove)
	if err := os.Remove(filepath.Join(agents.HostRoot(last), pauseBeforeGates)); err != nil {
		t.Fatal(err)
	}
	s.logf("EVIDENCE skew: last control-plane node %s paused %s; a worker Machine asked for %s %s after it paused (%v); held workers (InPlaceUpdate %s): %v",
		last, time.Since(lastPaused).Round(100*time.Millisecond), toVersion, held.moved.Sub(lastPaused).Round(100*time.Millisecond),
		held.movedMachines, inplacev1.ReasonWaitingForControlPlane, held.waiting)
	if len(held.waiting) == 0 {
		// Errorf, not Fatal: the cordon order below says what a missing hold did.
		t.Errorf("no worker Machine showed InPlaceUpdate reason %s while control-plane node %s was paused and workers %v asked for %s",
			inplacev1.ReasonWaitingForControlPlane, last, held.movedMachines, toVersion)
	}
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

// armPause makes each node's simulated agent pause before the action of pause
// (a pause-before-<action> file of the host), and removes what is left of the files
// when the test ends so that no agent stays blocked.
func (s *scenario) armPause(agents *localstack.Agents, nodes []string, pause string) {
	s.t.Helper()
	for _, n := range nodes {
		if err := writeHostFile(agents, n, pause, ""); err != nil {
			s.t.Fatal(err)
		}
	}
	s.t.Cleanup(func() {
		for _, n := range nodes {
			_ = os.Remove(filepath.Join(agents.HostRoot(n), pause))
		}
	})
}

// lastToPause waits for nodes armed with armPause to reach their pause one after
// the other, lets each go on at once but the last, and returns that one, still
// paused. KubeadmControlPlane with maxSurge 0 updates one Machine at a time, so
// the last control-plane node to pause is the last one updated.
func (s *scenario) lastToPause(agents *localstack.Agents, nodes []string, pause string) string {
	s.t.Helper()
	var released []string
	var last string
	s.eventually(rolloutTimeout, "the last control-plane node paused ("+pause+")", func() error {
		for _, n := range nodes {
			if slices.Contains(released, n) {
				continue
			}
			if _, err := hostFile(agents, n, ".sim/paused-at"); err != nil {
				continue
			}
			if len(released) == len(nodes)-1 {
				last = n
				return nil
			}
			if err := os.Remove(filepath.Join(agents.HostRoot(n), pause)); err != nil {
				return err
			}
			released = append(released, n)
			s.logf("control-plane node %s paused (%s); released", n, pause)
		}
		return fmt.Errorf("paused and released so far: %v", released)
	})
	return last
}

// workersWhilePaused is what the workers did while the last control-plane node was paused.
type workersWhilePaused struct {
	// moved is when a worker Machine was first seen asking for the new version,
	// movedMachines those Machines.
	moved         time.Time
	movedMachines []string
	// waiting are the worker Machines seen with InPlaceUpdate reason
	// WaitingForControlPlane.
	waiting []string
}

// workersWhileControlPlanePaused watches the cluster's worker Machines until one
// asks for version (the topology controller moved its MachineDeployment), then
// for heldFor more, and returns what it saw. The caller keeps the last
// control-plane node paused meanwhile.
func (s *scenario) workersWhileControlPlanePaused(cluster, version string, heldFor time.Duration) workersWhilePaused {
	s.t.Helper()
	var seen workersWhilePaused
	observe := func() {
		for _, m := range s.machines(cluster) {
			if _, cp := m.Labels[clusterv1.MachineControlPlaneLabel]; cp {
				continue
			}
			if m.Spec.Version == version && !slices.Contains(seen.movedMachines, m.Name) {
				if seen.moved.IsZero() {
					seen.moved = time.Now()
				}
				seen.movedMachines = append(seen.movedMachines, m.Name)
			}
			c := meta.FindStatusCondition(m.Status.Conditions, inplacev1.InPlaceUpdateCondition)
			if c != nil && c.Reason == inplacev1.ReasonWaitingForControlPlane && !slices.Contains(seen.waiting, m.Name) {
				seen.waiting = append(seen.waiting, m.Name)
			}
		}
	}
	s.eventually(rolloutTimeout, "a worker Machine asking for "+version+" while the last control plane is paused", func() error {
		if observe(); seen.moved.IsZero() {
			return fmt.Errorf("no worker Machine asks for %s yet", version)
		}
		return nil
	})
	for time.Since(seen.moved) < heldFor {
		time.Sleep(time.Second)
		observe()
	}
	return seen
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
