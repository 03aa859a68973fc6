//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// TestUpstreamFakeExtensionBaseline measures one in-place round (a files change on 3
// control-plane + 2 worker machines) with upstream's fake test extension on the same
// stack and ClusterClass: the baseline our extension must beat. The fake extension
// touches no node; it answers retryAfterSeconds=5 until 15-20 s have passed per machine.
func TestUpstreamFakeExtensionBaseline(t *testing.T) {
	t.Parallel()
	spec := localstack.UpstreamTestExtension(suite.stack.BinDir(), "upstream-fake", map[string]string{extensionLabel: extUpstream})
	if _, err := suite.stack.StartExtension(suite.ctx, spec); err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, "baseline", extUpstream)
	if err := s.stack.CreateClusterClass(s.ctx, s.ns, "inplace"); err != nil {
		t.Fatal(err)
	}
	const cluster = "base"
	if err := s.stack.CreateCluster(s.ctx, localstack.ClusterSpec{
		Namespace: s.ns, Name: cluster, Class: "inplace", Version: fromVersion,
		ControlPlaneReplicas: 3, WorkerReplicas: 2, MDMaxSurge: 0, MDMaxUnavailable: 1,
		Files: []localstack.File{{Path: "/etc/capi-inplace-e2e/round", Content: "0"}},
	}); err != nil {
		t.Fatal(err)
	}
	s.waitClusterReady(cluster, 5)
	before := machineIDs(s.machines(cluster))
	watch := s.watchMachines()

	roundStart := time.Now()
	file := localstack.File{Path: "/etc/capi-inplace-e2e/round", Content: "1"}
	s.setTopology(cluster, "", []localstack.File{file})
	done := s.inPlaceDone(cluster, file)
	s.waitRolledOut(cluster, fromVersion, 5, true, 5*time.Minute, func(ms []clusterv1.Machine) error {
		if err := sameMachines(before, ms); err != nil {
			return err
		}
		return done(ms)
	})
	round := time.Since(roundStart)
	added, deleted := watch.result()
	s.logf("EVIDENCE baseline: upstream fake extension in-place round (files change, 3 CP + 2 workers) took %s; per machine %v; created during round %v; deleted %v",
		round.Round(time.Second), watch.durations(), added, deleted)
	if len(added) > 0 || len(deleted) > 0 {
		t.Fatalf("machines created %v / deleted %v during an in-place round", added, deleted)
	}
}

// sameMachines fails unless ms are exactly the Machines of before, same names and UIDs.
func sameMachines(before map[string]typesUID, ms []clusterv1.Machine) error {
	now := machineIDs(ms)
	if len(now) != len(before) {
		return fmt.Errorf("machines %v, want %v", keys(now), keys(before))
	}
	for n, uid := range before {
		if now[n] != uid {
			return fmt.Errorf("machine %s: UID %q, want %q", n, now[n], uid)
		}
	}
	return nil
}
