package fleetrollout

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func TestSnapshotOf(t *testing.T) {
	tests := []struct {
		name        string
		st          inplacev1.FleetRolloutStatus
		wantPhase   string
		wantHalted  string
		wantBatch   bool
		wantCounts  map[string]float64
		wantHeld    float64
		wantStaged  float64
		wantBatches float64
	}{
		{
			name:       "before any batch: every state and phase present, no batch",
			st:         inplacev1.FleetRolloutStatus{Phase: inplacev1.FleetPhasePaused, Counts: inplacev1.FleetCounts{Total: 3, Pending: 3}},
			wantPhase:  PhaseLabelPaused,
			wantCounts: map[string]float64{StateLabelPending: 3, StateLabelUpdating: 0, StateLabelSucceeded: 0, StateLabelFailed: 0, StateLabelSkipped: 0},
		},
		{
			name: "a batch under way with Clusters held back by spreadBy",
			st: inplacev1.FleetRolloutStatus{Phase: inplacev1.FleetPhaseProgressing, Batches: 4,
				Counts:       inplacev1.FleetCounts{Total: 9, Pending: 4, HeldBySpread: 2, Updating: 2, Succeeded: 2, Skipped: 1},
				CurrentBatch: &inplacev1.FleetBatchStatus{Index: 2}},
			wantPhase: PhaseLabelProgressing, wantBatch: true, wantHeld: 2, wantBatches: 4,
			wantCounts: map[string]float64{StateLabelPending: 4, StateLabelUpdating: 2, StateLabelSucceeded: 2, StateLabelFailed: 0, StateLabelSkipped: 1},
		},
		{
			name: "Clusters staged on their nodes, waiting for their maintenance window",
			st: inplacev1.FleetRolloutStatus{Phase: inplacev1.FleetPhaseProgressing, Batches: 2,
				Counts:       inplacev1.FleetCounts{Total: 6, Updating: 4, StagedForWindow: 3, Succeeded: 2},
				CurrentBatch: &inplacev1.FleetBatchStatus{Index: 1}},
			wantPhase: PhaseLabelProgressing, wantBatch: true, wantStaged: 3, wantBatches: 2,
			wantCounts: map[string]float64{StateLabelPending: 0, StateLabelUpdating: 4, StateLabelSucceeded: 2, StateLabelFailed: 0, StateLabelSkipped: 0},
		},
		{
			name:      "halted",
			st:        statusOf(inplacev1.FleetPhaseHalted, 0, inplacev1.FleetHaltCanaryFailed, "s1=Failed:MachineFailed"),
			wantPhase: PhaseLabelHalted, wantHalted: inplacev1.FleetHaltCanaryFailed, wantBatch: true, wantBatches: 3,
			wantCounts: map[string]float64{StateLabelPending: 0, StateLabelUpdating: 0, StateLabelSucceeded: 0, StateLabelFailed: 0, StateLabelSkipped: 0},
		},
		{
			name:      "completed with its Halted condition still True: nothing is stopped",
			st:        statusOf(inplacev1.FleetPhaseCompleted, 1, inplacev1.FleetHaltSuccessThreshold, "s1=Failed:TargetReverted"),
			wantPhase: PhaseLabelCompleted, wantBatch: true, wantBatches: 3,
			wantCounts: map[string]float64{StateLabelPending: 0, StateLabelUpdating: 0, StateLabelSucceeded: 0, StateLabelFailed: 0, StateLabelSkipped: 0},
		},
		{
			name:       "waiting for approval",
			st:         inplacev1.FleetRolloutStatus{Phase: inplacev1.FleetPhaseWaitingForApproval},
			wantPhase:  PhaseLabelWaitingForApproval,
			wantCounts: map[string]float64{StateLabelPending: 0, StateLabelUpdating: 0, StateLabelSucceeded: 0, StateLabelFailed: 0, StateLabelSkipped: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := snapshotOf(tt.st)
			g.Expect(s.clusters).To(Equal(tt.wantCounts))
			g.Expect(s.held).To(Equal(tt.wantHeld))
			g.Expect(s.staged).To(Equal(tt.wantStaged))
			g.Expect(s.phase).To(HaveLen(6), "every phase, so none is left at 1")
			for phase, v := range s.phase {
				want := 0.0
				if phase == tt.wantPhase {
					want = 1
				}
				g.Expect(v).To(Equal(want), phase)
			}
			g.Expect(s.halted).To(HaveLen(4))
			for reason, v := range s.halted {
				want := 0.0
				if reason == tt.wantHalted {
					want = 1
				}
				g.Expect(v).To(Equal(want), reason)
			}
			g.Expect(s.hasBatch).To(Equal(tt.wantBatch))
			g.Expect(s.batches).To(Equal(tt.wantBatches))
		})
	}
}

// TestMetricsForget checks that a rollout's series go with it and leave the
// others alone.
func TestMetricsForget(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred(), "a second set on the same registry shares the series")

	halted := statusOf(inplacev1.FleetPhaseHalted, 1, inplacev1.FleetHaltFailureBudget, "s1=Failed:MachineFailed")
	halted.Counts.StagedForWindow = 2
	m.Observe("a", halted, inplacev1.FleetHaltFailureBudget)
	again.Observe("b", statusOf(inplacev1.FleetPhaseProgressing, -1, ""), "")
	for _, tt := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"capi_inplace_fleet_rollout_phase", []string{"rollout", "a", "phase", PhaseLabelHalted}, 1},
		{"capi_inplace_fleet_rollout_phase", []string{"rollout", "a", "phase", PhaseLabelProgressing}, 0},
		{"capi_inplace_fleet_rollout_phase", []string{"rollout", "b", "phase", PhaseLabelProgressing}, 1},
		{"capi_inplace_fleet_rollout_halts_total", []string{"rollout", "a", "reason", inplacev1.FleetHaltFailureBudget}, 1},
		{"capi_inplace_fleet_rollout_halted", []string{"rollout", "a", "reason", inplacev1.FleetHaltFailureBudget}, 1},
		{"capi_inplace_fleet_rollout_current_batch", []string{"rollout", "a"}, 1},
		{"capi_inplace_fleet_rollout_clusters_staged_for_window", []string{"rollout", "a"}, 2},
		{"capi_inplace_fleet_rollout_clusters_staged_for_window", []string{"rollout", "b"}, 0},
		{"capi_inplace_fleet_rollout_current_batch", []string{"rollout", "b"}, -1},
	} {
		g.Expect(valueIn(reg, tt.name, tt.labels...)).To(Equal(tt.want), "%s%v", tt.name, tt.labels)
	}

	m.Forget("a")
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	series := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "capi_inplace_fleet_rollout_") {
			continue
		}
		for _, s := range f.GetMetric() {
			series++
			for _, l := range s.GetLabel() {
				if l.GetName() == "rollout" {
					g.Expect(l.GetValue()).To(Equal("b"), f.GetName())
				}
			}
		}
	}
	g.Expect(series).To(Equal(5+1+1+6+4+1), "b's series remain: states, held, staged, phases, halt reasons, batches (no batch yet)")

	var nilMetrics *Metrics
	nilMetrics.Observe("a", halted, "")
	nilMetrics.Forget("a")
}

// valueIn reads the value of the series of name whose labels include the given
// pairs from reg; -1 when there is none.
func valueIn(reg prometheus.Gatherer, name string, labels ...string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), nil
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), nil
			}
		}
	}
	return -1, nil
}
