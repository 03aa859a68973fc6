package status

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

func TestBuildFleet(t *testing.T) {
	halted := cluster("c1")
	st := fleet.State{Failures: []fleet.Failure{{Machine: "m1", Node: "w1", Cause: "RolledBack: GateFailed", Plan: "p"},
		{Machine: "m3", Node: "w3", Pool: "edge", Cause: "Failed: ApplyFailed", Plan: "q"}}}
	halted.Annotations = map[string]string{
		inplacev1.FleetStateAnnotation:         st.Encode(),
		inplacev1.MaintenanceWindowsAnnotation: "Sat 02:00-06:00 Europe/Berlin", // now is a Monday
		inplacev1.GuardAnnotation:              inplacev1.GuardDisabled,
	}
	halted.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse,
		Reason: inplacev1.ReasonHalted, Message: "halted: 1 of 1 failures allowed (node w1: RolledBack: GateFailed); node w2 not started"}}
	m1 := machine("m1")
	m1.Annotations = map[string]string{inplacev1.RetryAnnotation: "true"}
	m2 := machine("m2")
	m2.Annotations = map[string]string{inplacev1.CancelAnnotation: "true"}

	paused := cluster("c2")
	paused.Annotations = map[string]string{inplacev1.PausedAnnotation: "true", inplacev1.FleetStateAnnotation: "{broken",
		inplacev1.MaintenanceWindowsAnnotation: "Mon 00:00-24:00 UTC"}

	next := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	closed, open := false, true
	for _, tc := range []struct {
		name     string
		c        clusterv1.Cluster
		machines []clusterv1.Machine
		want     FleetView
	}{
		{name: "nothing set", c: cluster("c0"), want: FleetView{Guard: "on"}},
		{name: "halted, window closed, guard off, requests", c: halted, machines: []clusterv1.Machine{m2, m1}, want: FleetView{
			Guard: "off", State: FleetHalted, Message: "halted: 1 of 1 failures allowed (node w1: RolledBack: GateFailed); node w2 not started",
			Failures: []string{"w1: RolledBack: GateFailed", "w3 (pool edge): Failed: ApplyFailed"}, Windows: "Sat 02:00-06:00 Europe/Berlin", WindowOpen: &closed, NextOpening: &next,
			Cancelled: []string{"m2"}, RetryRequested: []string{"m1"},
		}},
		{name: "paused by annotation, broken record, open window", c: paused, want: FleetView{
			Guard: "on", State: FleetPaused, Message: "cluster is paused for in-place updates",
			Windows: "Mon 00:00-24:00 UTC", WindowOpen: &open, RecordError: "decode fleet state: invalid character 'b' looking for beginning of object key string",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(buildFleet(&tc.c, tc.machines, now)).To(Equal(tc.want))
		})
	}

	var quiet bytes.Buffer
	c0 := cluster("c0")
	renderFleet(&quiet, buildFleet(&c0, nil, now))
	NewWithT(t).Expect(quiet.String()).To(BeEmpty(), "defaults add no lines to the table")

	var buf bytes.Buffer
	renderFleet(&buf, buildFleet(&halted, []clusterv1.Machine{m1, m2}, now))
	NewWithT(t).Expect(buf.String()).To(Equal(`  guard: off; failure budget: 2 failed node(s) recorded (w1: RolledBack: GateFailed; w3 (pool edge): Failed: ApplyFailed)
  fleet: Halted: halted: 1 of 1 failures allowed (node w1: RolledBack: GateFailed); node w2 not started
  maintenance windows "Sat 02:00-06:00 Europe/Berlin": closed, next opening 2026-12-05T01:00:00Z
  cancelled: m2
  retry requested: m1
`))
}
