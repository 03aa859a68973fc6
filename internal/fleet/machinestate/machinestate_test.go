package machinestate

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const (
	from   = "v1.35.0"
	target = "v1.36.0"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// machine asks for version; kubelet "" leaves status.nodeInfo out.
func machine(version, kubelet string, mod ...func(*clusterv1.Machine)) *clusterv1.Machine {
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m1"}, Spec: clusterv1.MachineSpec{Version: version}}
	if kubelet != "" {
		m.Status.NodeInfo = &corev1.NodeSystemInfo{KubeletVersion: kubelet}
	}
	for _, f := range mod {
		f(m)
	}
	return m
}

func inPlace(reason string) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: inplacev1.InPlaceUpdateCondition,
			Status: metav1.ConditionFalse, Reason: reason, Message: "said " + reason})
	}
}

func capiUpdating(status metav1.ConditionStatus) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: clusterv1.MachineUpdatingCondition,
			Status: status, Reason: clusterv1.MachineInPlaceUpdatingReason})
	}
}

func annotated(m *clusterv1.Machine) {
	m.Annotations = map[string]string{clusterv1.UpdateInProgressAnnotation: ""}
}

// phaseRecord puts the coordinator's phase record, of phase p since t, on the Machine.
func phaseRecord(p protocol.UpdatePhase, since time.Time) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		m.Annotations[inplacev1.UpdatePhaseAnnotation] = protocol.PhaseRecord{Plan: "h1", Phase: p, Start: since, Since: since}.Encode()
	}
}

// capiUpdatingSince is Cluster API's Updating condition, True since t.
func capiUpdatingSince(t time.Time) func(*clusterv1.Machine) {
	return func(m *clusterv1.Machine) {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: clusterv1.MachineUpdatingCondition,
			Status: metav1.ConditionTrue, Reason: clusterv1.MachineInPlaceUpdatingReason, LastTransitionTime: metav1.NewTime(t)})
	}
}

func deleting(m *clusterv1.Machine) {
	now := metav1.Now()
	m.DeletionTimestamp = &now
}

func TestOf(t *testing.T) {
	tests := []struct {
		name        string
		m           *clusterv1.Machine
		want        State
		wantReason  string
		wantReached bool // against target
	}{
		{name: "the node runs what the Machine asks for", m: machine(target, target), want: UpToDate, wantReached: true},
		{name: "build metadata aside", m: machine(target, target+"+k3s1"), want: UpToDate, wantReached: true},
		{name: "up to date, but at another version than the target", m: machine(from, from), want: UpToDate},
		{name: "the node runs another release", m: machine(target, from), want: Outdated},
		{name: "no status.nodeInfo proves nothing", m: machine(target, ""), want: Unreported},
		{name: "a nodeInfo without a kubelet version proves nothing", m: machine(target, "", func(m *clusterv1.Machine) {
			m.Status.NodeInfo = &corev1.NodeSystemInfo{OSImage: "edge-os"}
		}), want: Unreported},
		{name: "no spec.version is never up to date", m: machine("", target), want: Outdated},
		// Cluster API has written the target and its kubelet is there, but its
		// update (the hooks, the infrastructure) is not finished.
		{name: "Cluster API's update-in-progress annotation", m: machine(target, target, annotated), want: Updating},
		{name: "Cluster API's Updating condition", m: machine(target, target, capiUpdating(metav1.ConditionTrue)), want: Updating},
		{name: "Cluster API's Updating condition False", m: machine(target, target, capiUpdating(metav1.ConditionFalse)), want: UpToDate, wantReached: true},
		{name: "our update in progress", m: machine(target, from, inPlace(inplacev1.ReasonInProgress)), want: Updating},
		{name: "in progress outranks a missing nodeInfo", m: machine(target, "", annotated), want: Updating},
		{name: "our drain blocked", m: machine(target, from, annotated, inPlace(inplacev1.ReasonDrainBlocked)),
			want: DrainBlocked, wantReason: inplacev1.ReasonDrainBlocked},
		{name: "our drain blocked, with the kubelet already reported", m: machine(target, target, inPlace(inplacev1.ReasonDrainBlocked)),
			want: DrainBlocked, wantReason: inplacev1.ReasonDrainBlocked},
		{name: "a succeeded update", m: machine(target, target, inPlace(inplacev1.ReasonSucceeded)), want: UpToDate, wantReached: true},
		{name: "rolled back", m: machine(target, from, inPlace(inplacev1.ReasonRolledBack)), want: Failed, wantReason: inplacev1.ReasonRolledBack},
		{name: "past a deadline while Cluster API still updates", m: machine(target, from, annotated, inPlace(inplacev1.ReasonDeadlineExceeded)),
			want: Failed, wantReason: inplacev1.ReasonDeadlineExceeded},
		{name: "never picked up", m: machine(target, from, inPlace(inplacev1.ReasonPlanNotPickedUp)), want: Failed, wantReason: inplacev1.ReasonPlanNotPickedUp},
		{name: "degraded", m: machine(target, from, inPlace(inplacev1.ReasonDegraded)), want: Failed, wantReason: inplacev1.ReasonDegraded},
		{name: "waiting for the control plane", m: machine(target, from, annotated, inPlace(inplacev1.ReasonWaitingForControlPlane)),
			want: WaitingForControlPlane, wantReason: inplacev1.ReasonWaitingForControlPlane},
		{name: "waiting for the control plane, its plan staged meanwhile", m: machine(target, from, annotated, phaseRecord(protocol.UpdatePhaseStaged, t0), inPlace(inplacev1.ReasonWaitingForControlPlane)),
			want: WaitingForControlPlane, wantReason: inplacev1.ReasonWaitingForControlPlane},
		{name: "a wait for the control plane without Cluster API updating says nothing", m: machine(target, target, inPlace(inplacev1.ReasonWaitingForControlPlane)),
			want: UpToDate, wantReached: true},
		{name: "staged ahead of a closed window", m: machine(target, from, annotated, phaseRecord(protocol.UpdatePhaseStaged, t0)), want: Staged},
		{name: "staged, after Cluster API began the update", m: machine(target, from, capiUpdatingSince(t0), phaseRecord(protocol.UpdatePhaseStaged, t0.Add(time.Hour))), want: Staged},
		{name: "a staged record older than Cluster API's update is another update's",
			m: machine(target, from, capiUpdatingSince(t0.Add(time.Hour)), phaseRecord(protocol.UpdatePhaseStaged, t0)), want: Updating},
		{name: "still staging is updating", m: machine(target, from, annotated, phaseRecord(protocol.UpdatePhaseStaging, t0)), want: Updating},
		{name: "cordoned after the window opened", m: machine(target, from, annotated, phaseRecord(protocol.UpdatePhaseDraining, t0)), want: Updating},
		{name: "a staged record without Cluster API updating says nothing", m: machine(target, target, phaseRecord(protocol.UpdatePhaseStaged, t0)),
			want: UpToDate, wantReached: true},
		{name: "a failure outranks a staged record", m: machine(target, from, annotated, phaseRecord(protocol.UpdatePhaseStaged, t0), inPlace(inplacev1.ReasonDeadlineExceeded)),
			want: Failed, wantReason: inplacev1.ReasonDeadlineExceeded},
		{name: "going away", m: machine(target, from, annotated, deleting), want: Deleting},
		{name: "a failure outranks going away", m: machine(target, from, deleting, inPlace(inplacev1.ReasonFailed)), want: Failed, wantReason: inplacev1.ReasonFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v := Of(tt.m)
			g.Expect(v.State).To(Equal(tt.want))
			g.Expect(v.Reason).To(Equal(tt.wantReason))
			if tt.wantReason != "" {
				g.Expect(v.Message).To(Equal("said " + tt.wantReason))
			}
			g.Expect(v.State.InProgress()).To(Equal(tt.want == Updating || tt.want == DrainBlocked || tt.want == WaitingForControlPlane || tt.want == Staged))
			g.Expect(Reached(tt.m, target)).To(Equal(tt.wantReached))
		})
	}
}

func TestStagedAndWaiting(t *testing.T) {
	tests := []struct {
		name   string
		states []State
		want   bool
	}{
		{name: "no Machines", want: false},
		{name: "one staged", states: []State{Staged}, want: true},
		{name: "staged, the rest not started or done", states: []State{Staged, Outdated, UpToDate, Unreported, Deleting}, want: true},
		{name: "another still staging", states: []State{Staged, Updating}, want: false},
		{name: "a drain blocked", states: []State{Staged, DrainBlocked}, want: false},
		{name: "a worker waiting for the control plane", states: []State{Staged, WaitingForControlPlane}, want: false},
		{name: "a failure needs a human first", states: []State{Staged, Failed}, want: false},
		{name: "nothing staged", states: []State{Outdated, UpToDate}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(StagedAndWaiting(tt.states)).To(Equal(tt.want))
		})
	}
}
