package bench

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

// TestSeedFleet checks the fleet the fleet section times: every state fleet status
// distinguishes, in the shares SeedFleet promises, through the real API server's
// validation of Cluster API's CRDs.
func TestSeedFleet(t *testing.T) {
	if testEnv == nil {
		t.Skip("KUBEBUILDER_ASSETS not set (run make test)")
	}
	g := NewWithT(t)
	ctx := context.Background()
	c, err := client.New(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(SeedFleet(ctx, c, 200)).To(Succeed())
	g.Expect(SeedFleet(ctx, c, 200)).To(Succeed(), "idempotent")

	var clusters clusterv1.ClusterList
	var machines clusterv1.MachineList
	var got status.FleetList
	for _, ns := range []string{FleetNamespace(0), FleetNamespace(199)} {
		g.Expect(c.List(ctx, &clusters, client.InNamespace(ns))).To(Succeed())
		g.Expect(c.List(ctx, &machines, client.InNamespace(ns))).To(Succeed())
		l := status.BuildFleetList(clusters.Items, machines.Items, time.Now())
		g.Expect(l.Summary).To(Equal(status.FleetSummary{Clusters: 100, UpToDate: 90, Updating: 5, Failed: 2, Outdated: 3}), ns)
		got.Clusters = append(got.Clusters, l.Clusters...)
	}
	g.Expect(got.Clusters[0].OSImages).To(Equal([]string{fleetOldImage}), "failed: rolled back")
	g.Expect(got.Clusters[10].OSImages).To(Equal([]string{fleetNewImage}), "done")
}
