package singlenode

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// TestOperatorRequest: the Machine watch wakes the controller for a retry, and for
// the cancel annotation's arrival and removal (which no KCP event announces), not
// for the Machine's other changes.
func TestOperatorRequest(t *testing.T) {
	machine := func(annotations ...string) *clusterv1.Machine {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{}}}
		for _, a := range annotations {
			m.Annotations[a] = "true"
		}
		return m
	}
	tests := []struct {
		name     string
		old, new *clusterv1.Machine
		want     bool
	}{
		{name: "no request", old: machine(), new: machine(), want: false},
		{name: "retry added", old: machine(), new: machine(inplacev1.RetryAnnotation), want: true},
		{name: "cancel added", old: machine(), new: machine(inplacev1.CancelAnnotation), want: true},
		{name: "cancel removed", old: machine(inplacev1.CancelAnnotation), new: machine(), want: true},
		{name: "cancel kept, another change", old: machine(inplacev1.CancelAnnotation), new: machine(inplacev1.CancelAnnotation, "other"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(operatorRequest().Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new})).To(Equal(tt.want))
		})
	}
	g := NewWithT(t)
	g.Expect(operatorRequest().Create(event.CreateEvent{Object: machine(inplacev1.CancelAnnotation)})).To(BeTrue(), "a cancelled Machine at start-up")
	g.Expect(operatorRequest().Create(event.CreateEvent{Object: machine()})).To(BeFalse())
}
