package fleetrollout

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/metrics"
)

// Metrics are the FleetRollout controller's Prometheus metrics: gauges of each
// rollout's status as the controller last wrote it, and a counter of halts. Every
// series carries the rollout's name (FleetRollouts are cluster-scoped, so no
// namespace) and label values from fixed sets, never a Cluster's name: a rollout
// of 3,000 Clusters has the same series as one of 3. A rollout's series go when
// the rollout does (Forget). Only the elected leader reconciles, so only it
// reports rollouts; a nil *Metrics records nothing.
type Metrics struct {
	clusters *prometheus.GaugeVec
	held     *prometheus.GaugeVec
	staged   *prometheus.GaugeVec
	phase    *prometheus.GaugeVec
	halted   *prometheus.GaugeVec
	batch    *prometheus.GaugeVec
	batches  *prometheus.GaugeVec
	halts    *prometheus.CounterVec
}

// Label values of the state label (a Cluster's state in a rollout), lower snake
// case as the extension's other state labels (capi_inplace_cluster_rollout_state).
const (
	StateLabelPending   = "pending"
	StateLabelUpdating  = "updating"
	StateLabelSucceeded = "succeeded"
	StateLabelFailed    = "failed"
	StateLabelSkipped   = "skipped"
)

// Label values of the phase label (a rollout's phase).
const (
	PhaseLabelProgressing        = "progressing"
	PhaseLabelPaused             = "paused"
	PhaseLabelWaitingForApproval = "waiting_for_approval"
	PhaseLabelHalted             = "halted"
	PhaseLabelAborted            = "aborted"
	PhaseLabelCompleted          = "completed"
)

// phaseLabels maps every phase of the API to its label; a phase gauge is written
// for each, 1 for the rollout's and 0 for the others, so that a rollout that
// leaves a phase leaves no series behind at 1.
func phaseLabels() map[inplacev1.FleetRolloutPhase]string {
	return map[inplacev1.FleetRolloutPhase]string{
		inplacev1.FleetPhaseProgressing:        PhaseLabelProgressing,
		inplacev1.FleetPhasePaused:             PhaseLabelPaused,
		inplacev1.FleetPhaseWaitingForApproval: PhaseLabelWaitingForApproval,
		inplacev1.FleetPhaseHalted:             PhaseLabelHalted,
		inplacev1.FleetPhaseAborted:            PhaseLabelAborted,
		inplacev1.FleetPhaseCompleted:          PhaseLabelCompleted,
	}
}

// haltReasons are the reason label's values: the Halted condition's reasons, as
// the API spells them (as capi_inplace_fleet_holds_total's reasons).
func haltReasons() []string {
	return []string{inplacev1.FleetHaltCanaryFailed, inplacev1.FleetHaltFailureBudget, inplacev1.FleetHaltSuccessThreshold, inplacev1.FleetHaltTimeout}
}

// snapshot is what the gauges show of one rollout's status: pure, so that the
// mapping is tested without a registry.
type snapshot struct {
	clusters map[string]float64 // by state label, every state present
	held     float64
	staged   float64
	phase    map[string]float64 // by phase label, every phase present
	halted   map[string]float64 // by halt reason, every reason present
	// batch is the current batch's index; hasBatch false before the first started.
	batch    float64
	hasBatch bool
	batches  float64
}

func snapshotOf(st inplacev1.FleetRolloutStatus) snapshot {
	s := snapshot{
		clusters: map[string]float64{
			StateLabelPending:   float64(st.Counts.Pending),
			StateLabelUpdating:  float64(st.Counts.Updating),
			StateLabelSucceeded: float64(st.Counts.Succeeded),
			StateLabelFailed:    float64(st.Counts.Failed),
			StateLabelSkipped:   float64(st.Counts.Skipped),
		},
		held:    float64(st.Counts.HeldBySpread),
		staged:  float64(st.Counts.StagedForWindow),
		phase:   map[string]float64{},
		halted:  map[string]float64{},
		batches: float64(st.Batches),
	}
	for p, l := range phaseLabels() {
		s.phase[l] = 0
		if st.Phase == p {
			s.phase[l] = 1
		}
	}
	// A halt shows while it stops starts: a rollout completed or aborted with
	// its Halted condition still True stops nothing any more.
	reason := ""
	if st.Phase == inplacev1.FleetPhaseHalted {
		reason = haltReason(st)
	}
	for _, r := range haltReasons() {
		s.halted[r] = 0
		if r == reason {
			s.halted[r] = 1
		}
	}
	if cb := st.CurrentBatch; cb != nil {
		s.batch, s.hasBatch = float64(cb.Index), true
	}
	return s
}

// haltReason is the reason of the status's Halted condition when it is True, or "".
func haltReason(st inplacev1.FleetRolloutStatus) string {
	c := meta.FindStatusCondition(st.Conditions, inplacev1.FleetHaltedCondition)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Reason
}

// NewMetrics creates the metrics and registers them on reg (the extension passes
// controller-runtime's registry, served with the extension's other metrics).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	rollout := []string{"rollout"}
	m := &Metrics{
		clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_clusters",
			Help: "Clusters of a FleetRollout by state (pending, updating, succeeded, failed, skipped), as its status last counted them.",
		}, []string{"rollout", "state"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_clusters_held_by_spread",
			Help: "Pending Clusters of a FleetRollout's current batch that wait because strategy.spreadBy's cap for their label value is reached.",
		}, rollout),
		staged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_clusters_staged_for_window",
			Help: "Updating Clusters of a FleetRollout whose update is staged on their nodes and waits for their maintenance window (counted as updating too).",
		}, rollout),
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_phase",
			Help: "1 for the phase of a FleetRollout (progressing, paused, waiting_for_approval, halted, aborted, completed), 0 for the others.",
		}, []string{"rollout", "phase"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_halted",
			Help: "1 while a halt stops a FleetRollout's starts (phase Halted), by the Halted condition's reason (CanaryFailed, FailureBudgetExhausted, SuccessThresholdMissed, ClusterTimedOut); 0 otherwise.",
		}, []string{"rollout", "reason"}),
		batch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_current_batch",
			Help: "The batch a FleetRollout works on (0: the canaries); absent before the first started.",
		}, rollout),
		batches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capi_inplace_fleet_rollout_batches",
			Help: "How many batches a FleetRollout has after its canaries.",
		}, rollout),
		halts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capi_inplace_fleet_rollout_halts_total",
			Help: "Halts of a FleetRollout, counted when the Halted condition turns True or changes its reason, by reason.",
		}, []string{"rollout", "reason"}),
	}
	var err error
	for _, g := range []**prometheus.GaugeVec{&m.clusters, &m.held, &m.staged, &m.phase, &m.halted, &m.batch, &m.batches} {
		if *g, err = metrics.Register(reg, *g); err != nil {
			return nil, err
		}
	}
	if m.halts, err = metrics.Register(reg, m.halts); err != nil {
		return nil, err
	}
	return m, nil
}

// Observe sets the gauges of rollout name to the status the controller wrote and
// counts halt, the halt that status began ("" when none did: transitions).
func (m *Metrics) Observe(name string, st inplacev1.FleetRolloutStatus, halt string) {
	if m == nil {
		return
	}
	s := snapshotOf(st)
	for state, v := range s.clusters {
		m.clusters.WithLabelValues(name, state).Set(v)
	}
	m.held.WithLabelValues(name).Set(s.held)
	m.staged.WithLabelValues(name).Set(s.staged)
	for phase, v := range s.phase {
		m.phase.WithLabelValues(name, phase).Set(v)
	}
	for reason, v := range s.halted {
		m.halted.WithLabelValues(name, reason).Set(v)
	}
	if s.hasBatch {
		m.batch.WithLabelValues(name).Set(s.batch)
	} else {
		m.batch.DeleteLabelValues(name)
	}
	m.batches.WithLabelValues(name).Set(s.batches)
	if halt != "" {
		m.halts.WithLabelValues(name, halt).Inc()
	}
}

// Forget drops every series of rollout name: the rollout is gone.
func (m *Metrics) Forget(name string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"rollout": name}
	for _, g := range []*prometheus.GaugeVec{m.clusters, m.held, m.staged, m.phase, m.halted, m.batch, m.batches} {
		g.DeletePartialMatch(l)
	}
	m.halts.DeletePartialMatch(l)
}
