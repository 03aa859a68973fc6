package coordinator

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The watchdog's writes (watchdog.go holds its pure core).

// recordPhase stores the update's clock on the Machine. A failed write is logged:
// the next call writes it again, and until then the phase is judged from the
// record as it was (a deadline can only fire later).
func (c *Coordinator) recordPhase(ctx context.Context, s *scope, rec protocol.PhaseRecord) {
	v := rec.Encode()
	err := c.patchMachineAnnotations(ctx, s.stored, "record the update phase of", func(ann map[string]string) bool {
		if ann[inplacev1.UpdatePhaseAnnotation] == v {
			return false
		}
		ann[inplacev1.UpdatePhaseAnnotation] = v
		return true
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not record the update's phase; the next call retries", "error", err.Error())
	}
}

// markPastDeadline says on the cordoned Node why it stays cordoned; best effort
// (the Machine's condition says it too, and the next call writes it again).
func (c *Coordinator) markPastDeadline(ctx context.Context, s *scope, msg string) {
	v := bounded(msg)
	err := c.patchNode(ctx, s, "mark the deadline on", func(_ *corev1.Node, ann map[string]string) {
		ann[inplacev1.DeadlineExceededAnnotation] = v
	})
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Could not mark the node past its deadline; the next call retries", "error", err.Error())
	}
}

// releaseBrokenNode applies the rule for a node the update leaves cordoned and
// broken (Degraded, or past a deadline after cordon): the remediation hold is
// released so that a MachineHealthCheck can replace the node, unless the policy
// keeps it for the Machine's pool (Deadlines.KeepRemediationHold), in which case the metrics say so and
// an alert fires (CapiInplaceRemediationHeld).
func (c *Coordinator) releaseBrokenNode(ctx context.Context, s *scope) (Outcome, bool) {
	if c.deadlines(s.stored).KeepRemediationHold {
		return Outcome{}, true
	}
	return c.liftRemediationHold(ctx, s)
}

// watchOffline judges the update's clock on a call that could not reach the
// workload cluster's API server (out answers it otherwise): a paused phase
// (staging, pick-up) only notes the outage; a phase after cordon that passes its
// deadline fails the update, as the API server of a single control plane that
// cannot start may never answer again. Nothing is written to the workload cluster.
func (c *Coordinator) watchOffline(ctx context.Context, s *scope, out Outcome) Outcome {
	deadlines := c.deadlines(s.stored)
	w := Watch(WatchInput{Now: c.opts.Now(), Record: protocol.DecodePhaseRecord(s.stored.Annotations[inplacev1.UpdatePhaseAnnotation]), Deadlines: deadlines})
	if w.Write {
		c.recordPhase(ctx, s, w.Record)
	}
	if !w.Expired {
		return out
	}
	if s.node == nil || s.node.Name == "" {
		s.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.stored.Status.NodeRef.Name}}
	}
	s.planHash, s.pastDeadline = w.Record.Plan, w.Record.Phase
	d := expiredDecision(Observation{Node: s.node.Name, PlanHash: s.planHash}, w.Record, deadlines)
	c.recordFailure(ctx, s, d)
	if out, ok := c.releaseBrokenNode(ctx, s); !ok {
		return out
	}
	c.report(ctx, s, d)
	if c.opts.Metrics != nil {
		c.opts.Metrics.RecordCall(CallRecord{Cluster: s.clusterKey.String(), Node: s.node.Name, InFlight: true, Started: w.Record.Start,
			CordonedByUs: true, PastDeadline: string(w.Record.Phase), RemediationHeld: remediationHeld(s)})
	}
	return final(d.Cause, d.Message)
}

// updateBegan is when Cluster API began the Machine's update: the last transition
// of its Updating condition to True, written by Cluster API's Machine controller in
// the management cluster (zero when absent, as on the single-node path).
func updateBegan(m *clusterv1.Machine) time.Time {
	if c := meta.FindStatusCondition(m.Status.Conditions, clusterv1.MachineUpdatingCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// remediationHeld reports whether the Machine of s still carries our
// remediation hold.
func remediationHeld(s *scope) bool {
	if s.stored == nil {
		return false
	}
	_, ok := s.stored.Annotations[inplacev1.RemediationHeldByAnnotation]
	return ok
}
