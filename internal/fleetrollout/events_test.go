package fleetrollout

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// statusOf builds a status: phase, the current batch (-1: none), the halt reason
// ("" not halted) and Clusters as name=State[:Reason].
func statusOf(phase inplacev1.FleetRolloutPhase, batch int32, halt string, clusters ...string) inplacev1.FleetRolloutStatus {
	st := inplacev1.FleetRolloutStatus{Phase: phase, Batches: 3}
	if batch >= 0 {
		st.CurrentBatch = &inplacev1.FleetBatchStatus{Index: batch, Canary: batch == 0, Counts: inplacev1.FleetCounts{Total: 2}}
	}
	cond := metav1.Condition{Type: inplacev1.FleetHaltedCondition, Status: metav1.ConditionFalse, Reason: inplacev1.FleetReasonNotHalted}
	if halt != "" {
		cond = metav1.Condition{Type: inplacev1.FleetHaltedCondition, Status: metav1.ConditionTrue, Reason: halt, Message: "why it halted"}
	}
	st.Conditions = []metav1.Condition{cond}
	for _, c := range clusters {
		name, state, _ := strings.Cut(c, "=")
		state, reason, _ := strings.Cut(state, ":")
		st.Clusters = append(st.Clusters, inplacev1.FleetClusterStatus{Namespace: "stores", Name: name, Batch: ptr.To[int32](1),
			State: inplacev1.FleetClusterState(state), Reason: reason, Message: "detail"})
	}
	return st
}

// ev is an Event as the tests compare it: type, reason and action, not its note.
type ev struct{ Type, Reason, Action string }

func TestTransitions(t *testing.T) {
	progressing, halted := inplacev1.FleetPhaseProgressing, inplacev1.FleetPhaseHalted
	tests := []struct {
		name       string
		prev, next inplacev1.FleetRolloutStatus
		want       []ev
		wantHalt   string
	}{
		{
			name: "nothing changed: no Event, however often the pass runs",
			prev: statusOf(progressing, 1, "", "s1=Updating", "s2=Failed:MachineFailed"),
			next: statusOf(progressing, 1, "", "s1=Updating", "s2=Failed:MachineFailed"),
		},
		{
			name: "the canaries start on the first pass",
			prev: inplacev1.FleetRolloutStatus{},
			next: statusOf(progressing, 0, "", "s1=Updating", "s2=Pending"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventBatchStarted, actionStartBatch}},
		},
		{
			name: "the next batch starts",
			prev: statusOf(progressing, 0, "", "s1=Succeeded", "s2=Pending"),
			next: statusOf(progressing, 1, "", "s1=Succeeded", "s2=Updating"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventBatchStarted, actionStartBatch}},
		},
		{
			name:     "a Cluster fails and the rollout halts: the halt's reason is the action",
			prev:     statusOf(progressing, 0, "", "s1=Updating", "s2=Pending"),
			next:     statusOf(halted, 0, inplacev1.FleetHaltCanaryFailed, "s1=Failed:MachineFailed", "s2=Pending"),
			want:     []ev{{corev1.EventTypeWarning, inplacev1.EventRolloutHalted, inplacev1.FleetHaltCanaryFailed}, {corev1.EventTypeWarning, inplacev1.EventClusterFailed, inplacev1.FleetReasonMachineFailed}},
			wantHalt: inplacev1.FleetHaltCanaryFailed,
		},
		{
			name:     "a halt whose reason changes is a new halt",
			prev:     statusOf(halted, 1, inplacev1.FleetHaltSuccessThreshold, "s1=Failed:MachineFailed"),
			next:     statusOf(halted, 1, inplacev1.FleetHaltFailureBudget, "s1=Failed:MachineFailed"),
			want:     []ev{{corev1.EventTypeWarning, inplacev1.EventRolloutHalted, inplacev1.FleetHaltFailureBudget}},
			wantHalt: inplacev1.FleetHaltFailureBudget,
		},
		{
			name: "a halt that holds is no new halt",
			prev: statusOf(halted, 1, inplacev1.FleetHaltFailureBudget, "s1=Failed:MachineFailed", "s2=Updating"),
			next: statusOf(halted, 1, inplacev1.FleetHaltFailureBudget, "s1=Failed:MachineFailed", "s2=Succeeded"),
		},
		{
			name: "a halt lifts (maxFailures raised): one Normal Event, the lifted halt's reason as action",
			prev: statusOf(halted, 1, inplacev1.FleetHaltFailureBudget, "s1=Failed:MachineFailed", "s2=Pending"),
			next: statusOf(progressing, 1, "", "s1=Failed:MachineFailed", "s2=Updating"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventRolloutHaltLifted, inplacev1.FleetHaltFailureBudget}},
		},
		{
			name: "a lifted halt stays lifted: no second Event",
			prev: statusOf(progressing, 1, "", "s1=Failed:MachineFailed", "s2=Updating"),
			next: statusOf(progressing, 1, "", "s1=Failed:MachineFailed", "s2=Updating"),
		},
		{
			name: "a halt that lifts while the rollout completes lifts all the same",
			prev: statusOf(halted, 1, inplacev1.FleetHaltTimeout, "s1=Failed:Timeout", "s2=Succeeded"),
			next: statusOf(inplacev1.FleetPhaseCompleted, 1, "", "s1=Failed:Timeout", "s2=Succeeded"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventRolloutHaltLifted, inplacev1.FleetHaltTimeout}, {corev1.EventTypeNormal, inplacev1.EventRolloutCompleted, actionComplete}},
		},
		{
			name: "a Cluster skipped at first sight (not guarded) is a transition",
			prev: inplacev1.FleetRolloutStatus{},
			next: statusOf(inplacev1.FleetPhasePaused, -1, "", "s1=Skipped:NotGuarded", "s2=Pending"),
			want: []ev{{corev1.EventTypeWarning, inplacev1.EventClusterSkipped, inplacev1.FleetReasonNotGuarded}},
		},
		{
			name: "completion",
			prev: statusOf(progressing, 2, "", "s1=Succeeded", "s2=Updating"),
			next: statusOf(inplacev1.FleetPhaseCompleted, 2, "", "s1=Succeeded", "s2=Succeeded"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventRolloutCompleted, actionComplete}},
		},
		{
			name: "abort skips the Clusters not started: Normal, the operator asked for it",
			prev: statusOf(progressing, 1, "", "s1=Updating", "s2=Pending"),
			next: statusOf(inplacev1.FleetPhaseAborted, 1, "", "s1=Updating", "s2=Skipped:Aborted"),
			want: []ev{{corev1.EventTypeNormal, inplacev1.EventClusterSkipped, inplacev1.FleetReasonAborted}, {corev1.EventTypeNormal, inplacev1.EventRolloutAborted, actionAbort}},
		},
		{
			name: "past maxClusterEvents one Event sums up the rest",
			prev: statusOf(progressing, 1, ""),
			next: func() inplacev1.FleetRolloutStatus {
				var cs []string
				for i := range maxClusterEvents + 5 {
					cs = append(cs, fmt.Sprintf("s%02d=Skipped:NotSelected", i))
				}
				return statusOf(progressing, 1, "", cs...)
			}(),
			want: func() []ev {
				var out []ev
				for range maxClusterEvents {
					out = append(out, ev{corev1.EventTypeWarning, inplacev1.EventClusterSkipped, inplacev1.FleetReasonNotSelected})
				}
				return append(out, ev{corev1.EventTypeWarning, inplacev1.EventClusterSkipped, actionMultiple})
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			events, halt := transitions(tt.prev, tt.next)
			var got []ev
			for _, e := range events {
				got = append(got, ev{e.Type, e.Reason, e.Action})
				g.Expect(len(e.Note)).To(BeNumerically("<=", maxEventNote))
				g.Expect(e.Note).NotTo(BeEmpty())
			}
			g.Expect(got).To(Equal(tt.want))
			g.Expect(halt).To(Equal(tt.wantHalt))
		})
	}
}

func TestLiftNote(t *testing.T) {
	halted := statusOf(inplacev1.FleetPhaseHalted, 1, inplacev1.FleetHaltFailureBudget)
	halted.ObservedGeneration = 1
	tests := []struct {
		name string
		next inplacev1.FleetRolloutStatus
		want string
	}{
		{
			name: "the operator changed the spec",
			next: func() inplacev1.FleetRolloutStatus {
				st := statusOf(inplacev1.FleetPhaseProgressing, 1, "")
				st.ObservedGeneration = 2
				return st
			}(),
			want: "FailureBudgetExhausted lifted (was: why it halted) by spec generation 2; phase Progressing",
		},
		{
			name: "the Clusters' states no longer meet the halt",
			next: func() inplacev1.FleetRolloutStatus {
				st := statusOf(inplacev1.FleetPhaseWaitingForApproval, 1, "")
				st.ObservedGeneration = 1
				return st
			}(),
			want: "FailureBudgetExhausted lifted (was: why it halted); phase WaitingForApproval",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(liftNote(haltReason(halted), halted, tt.next)).To(Equal(tt.want))
		})
	}
}
