package coordinator

import (
	"fmt"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
)

// capiPaused answers a call made while Cluster API pauses the Machine: its
// Cluster's spec.paused (set by clusterctl move), or the paused annotation on the
// Cluster or the stored Machine. Cluster API's own controllers do nothing with a
// paused object, and neither does the coordinator: no cordon, drain or write to
// the workload cluster, and no failure, only "call again" (a replayed call during
// a move, or one already under way when the pause came). The agent finishes a
// plan it has begun; the update goes on once the pause is lifted.
func capiPaused(cluster *clusterv1.Cluster, stored *clusterv1.Machine) (Outcome, bool) {
	if !annotations.IsPaused(cluster, stored) && !annotations.HasPaused(cluster) {
		return Outcome{}, false
	}
	return inProgress(retryPaused, fmt.Sprintf("Cluster API pauses Machine %s/%s (Cluster %s spec.paused or annotation %s on the Cluster or Machine): nothing is done until the pause is lifted",
		stored.Namespace, stored.Name, cluster.Name, clusterv1.PausedAnnotation)), true
}
