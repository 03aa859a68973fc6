package rollout

import (
	"fmt"
	"slices"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// spreadGroup is a Cluster's group under strategy.spreadBy: the value of its
// label, or, for Clusters without the label, one group of their own that no value
// can name (a label may hold the empty value).
type spreadGroup struct {
	value   string
	missing bool
}

// spreadGroups maps every observed Cluster to its group; nil without spreadBy.
func spreadGroups(s *inplacev1.FleetSpread, obs []Observation) map[Key]spreadGroup {
	if s == nil {
		return nil
	}
	out := make(map[Key]spreadGroup, len(obs))
	for _, o := range obs {
		v, ok := o.Labels[s.LabelKey]
		out[o.Key] = spreadGroup{value: v, missing: !ok}
	}
	return out
}

// spreadMax is how many Clusters of one group may update at once.
func spreadMax(s *inplacev1.FleetSpread) int {
	if s == nil || s.MaxConcurrent < 1 {
		return 1
	}
	return int(s.MaxConcurrent)
}

// spreadOrder deals the Clusters (in the rollout's order) round-robin across
// their groups, so that each batch spans as many groups as it can and its
// Clusters can start together: the first Cluster of every group, then the second
// of every group, and so on; groups in the order of their first Cluster.
func spreadOrder(clusters []*inplacev1.FleetClusterStatus, groups map[Key]spreadGroup) []*inplacev1.FleetClusterStatus {
	var order []spreadGroup
	byGroup := map[spreadGroup][]*inplacev1.FleetClusterStatus{}
	for _, e := range clusters {
		g := groups[keyOf(e)]
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], e)
	}
	out := make([]*inplacev1.FleetClusterStatus, 0, len(clusters))
	for round := 0; len(out) < len(clusters); round++ {
		for _, g := range order {
			if members := byGroup[g]; round < len(members) {
				out = append(out, members[round])
			}
		}
	}
	return slices.Clip(out)
}

// holdBySpread marks the Pending Clusters of batch cur whose group is at its cap
// (perGroup: the group's Clusters updating after this pass's starts) with reason
// HeldBySpread, so that the status counts and names them. The mark is cleared on
// the next pass (observe) and decided afresh.
func holdBySpread(s *inplacev1.FleetSpread, entries []*inplacev1.FleetClusterStatus, cur int32, groups map[Key]spreadGroup, perGroup map[spreadGroup]int) {
	if s == nil {
		return
	}
	perValue := spreadMax(s)
	for _, e := range entries {
		g, ok := groups[keyOf(e)]
		if !ok || e.State != inplacev1.FleetClusterPending || !inBatch(e, cur) || perGroup[g] < perValue {
			continue
		}
		who := fmt.Sprintf("with %s=%s", s.LabelKey, g.value)
		if g.missing {
			who = "without label " + s.LabelKey
		}
		e.Reason = inplacev1.FleetReasonHeldBySpread
		e.Message = truncate(fmt.Sprintf("%d of at most %d Clusters %s are updating (strategy.spreadBy)", perGroup[g], perValue, who), maxMessage)
	}
}
