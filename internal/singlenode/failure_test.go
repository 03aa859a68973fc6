package singlenode

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func TestMachineFailedUpdate(t *testing.T) {
	rec := FailedUpdate{Target: "t2", Reason: inplacev1.ReasonDeadlineExceeded}
	tests := []struct {
		name   string
		value  *string
		want   FailedUpdate
		wantOK bool
	}{
		{name: "none"},
		{name: "an encoded record reads back", value: ptr.To(rec.Encode()), want: rec, wantOK: true},
		{name: "not JSON counts as none", value: ptr.To("t2")},
		{name: "without a target counts as none", value: ptr.To(`{"reason":"InPlaceUpdateFailed"}`)},
		{name: "without a reason counts as none", value: ptr.To(`{"target":"t2"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := &clusterv1.Machine{}
			if tt.value != nil {
				m.Annotations = map[string]string{inplacev1.FailedUpdateAnnotation: *tt.value}
			}
			got, ok := MachineFailedUpdate(m)
			g.Expect(ok).To(Equal(tt.wantOK))
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestLegacyFailedUpdate(t *testing.T) {
	tests := []struct {
		name       string
		reason     string
		wantReason string
	}{
		{name: "a deadline stays a deadline: the late commit is still asked about", reason: inplacev1.ReasonDeadlineExceeded, wantReason: inplacev1.ReasonDeadlineExceeded},
		{name: "rolled back", reason: inplacev1.ReasonRolledBack, wantReason: inplacev1.ReasonRolledBack},
		{name: "an unmapped OS image", reason: inplacev1.ReasonRefused, wantReason: inplacev1.ReasonRefused},
		{name: "a condition a crash left in progress: the generic failure", reason: inplacev1.ReasonInProgress, wantReason: inplacev1.ReasonFailed},
		{name: "no condition: the generic failure", wantReason: inplacev1.ReasonFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			kcp := &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{inplacev1.HoldFailedAnnotation: "t2"}}}
			if tt.reason != "" {
				kcp.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: tt.reason}}
			}
			g.Expect(legacyFailedUpdate(kcp)).To(Equal(FailedUpdate{Target: "t2", Reason: tt.wantReason}))
		})
	}
}
