//go:build e2e

package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// chainMachines: KCP refuses maxSurge 0 (no new control-plane machine) below three
// replicas (a single control plane needs the single-node path), plus one worker.
const chainMachines = 4

// chainVersions is the ClusterClass's spec.kubernetesVersions: three minors up.
var chainVersions = []string{"v1.33.0", "v1.34.0", "v1.35.0", "v1.36.0"}

// TestChainedUpgradeInPlace (issue 14 §4): a ClusterClass cluster (3 control-plane
// machines, the fewest KCP allows with maxSurge 0, and 1 worker) whose class lists v1.33.0..v1.36.0 in spec.kubernetesVersions and names
// our GenerateUpgradePlan handler in spec.upgrade.external moves v1.33.0 -> v1.36.0
// in one topology write. Cluster API's default plan would move the worker three
// minors in one step (which the planner refuses, so it would be replaced); with the
// hook, the control plane and the worker take every minor, each in place. Asserted:
// each Machine's spec.version went through every minor in order, every Machine
// keeps its name and UID, no Machine is created or deleted (watched), every Node
// reports v1.36.0 and both Machines are up to date. The namespace is guarded by the
// in-place-only guard, which lets every step through.
func TestChainedUpgradeInPlace(t *testing.T) {
	t.Parallel()
	ext := ourExtension(t)
	s := newScenario(t, "chained", extOurs)
	// Guarded: the in-place-only guard judges the topology write (by the hook's first
	// step) and every KubeadmControlPlane and MachineDeployment write the topology
	// controller makes for the later steps; a refusal would stop the chain.
	registerGuardWebhook(s.ctx, t, s.stack, ext)
	if err := s.stack.CreateNamespace(s.ctx, s.ns, map[string]string{guardLabel: "true"}); err != nil {
		t.Fatal(err)
	}
	const class, cluster = "chain", "chain"
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, class); err != nil {
		t.Fatal(err)
	}
	s.chainClusterClass(class, extension.HandlerGenerateUpgradePlan+"."+ext.Spec.Name)
	from, to := chainVersions[0], chainVersions[len(chainVersions)-1]
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Class: class, Version: from,
		ControlPlaneReplicas: 3, WorkerReplicas: 1, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, chainMachines)
	agents := s.startAgents(cluster, chainMachines)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()
	steps := s.recordVersions(cluster)

	start := time.Now()
	s.setTopology(cluster, to, nil)
	s.logf("changed topology version %s -> %s (class versions %v)", from, to, chainVersions)
	s.waitInPlace(cluster, to, chainMachines, true, before, localstack.File{}, agents)
	took := time.Since(start)
	s.assertNoMachineChurn(watch)

	seen := steps()
	for name, versions := range seen {
		if !slices.Equal(versions, chainVersions) {
			t.Errorf("Machine %s went through %v, want every minor %v", name, versions, chainVersions)
		}
	}
	if len(seen) != chainMachines {
		t.Errorf("versions recorded for %d Machines, want %d: %v", len(seen), chainMachines, seen)
	}
	s.logf("EVIDENCE chained: %s -> %s in place (3 CP + 1 worker, every minor) took %s; versions per Machine %v; per machine %v",
		from, to, took.Round(time.Second), seen, watch.durations())
}

// chainClusterClass lists chainVersions in the ClusterClass and names the
// GenerateUpgradePlan handler (Cluster API then asks it for every plan).
func (s *scenario) chainClusterClass(class, handler string) {
	s.t.Helper()
	cc := &clusterv1.ClusterClass{}
	if err := s.stack.Client.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: class}, cc); err != nil {
		s.t.Fatal(err)
	}
	base := cc.DeepCopy()
	cc.Spec.KubernetesVersions = chainVersions
	cc.Spec.Upgrade.External.GenerateUpgradePlanExtension = handler
	if err := s.stack.Client.Patch(s.ctx, cc, client.MergeFrom(base)); err != nil {
		s.t.Fatalf("patch ClusterClass %s: %v", class, err)
	}
	s.logf("ClusterClass %s: kubernetesVersions %v, generateUpgradePlanExtension %s", class, chainVersions, handler)
}

// recordVersions polls the cluster's Machines and records, per Machine, each
// distinct spec.version in the order seen; the returned func stops and reports.
func (s *scenario) recordVersions(cluster string) func() map[string][]string {
	ctx, cancel := context.WithCancel(s.ctx)
	var mu sync.Mutex
	seen := map[string][]string{}
	record := func() {
		ms := &clusterv1.MachineList{}
		if err := s.stack.Client.List(ctx, ms, client.InNamespace(s.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms.Items {
			if vs := seen[m.Name]; len(vs) == 0 || vs[len(vs)-1] != m.Spec.Version {
				seen[m.Name] = append(vs, m.Spec.Version)
			}
		}
	}
	record()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				record()
			}
		}
	}()
	s.t.Cleanup(cancel)
	return func() map[string][]string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for k, v := range seen {
			out[k] = slices.Clone(v)
		}
		if len(out) == 0 {
			s.t.Logf("no Machine of %s recorded", cluster)
		}
		return out
	}
}
