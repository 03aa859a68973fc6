package coordinator

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
)

func TestMachineDrainOf(t *testing.T) {
	g := NewWithT(t)
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		clusterv1.ExcludeNodeDrainingAnnotation: "", clusterv1.ExcludeWaitForNodeVolumeDetachAnnotation: "yes"}}}
	m.Spec.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](90)
	m.Spec.Deletion.NodeVolumeDetachTimeoutSeconds = ptr.To[int32](-1)
	g.Expect(MachineDrainOf(m)).To(Equal(MachineDrain{Excluded: true, SkipVolumeDetach: true, DrainTimeout: 90 * time.Second}),
		"an empty annotation value counts (Cluster API checks presence); a negative timeout is none")
	g.Expect(MachineDrainOf(&clusterv1.Machine{})).To(Equal(MachineDrain{}))
}

// TestDrainMachineVerdict: the Machine's timeouts and exclusions against the
// policy's drain timeout, and the volume-detach wait after the drain.
func TestDrainMachineVerdict(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	blocked := drain.Result{Blockers: []drain.Blocker{{Pod: "a/web", PDB: "a/web", Reason: "budget"}}}
	done := drain.Result{Done: true}
	vols := []string{"PersistentVolume pv-1", "PersistentVolume pv-2"}
	tests := []struct {
		name    string
		md      MachineDrain
		res     drain.Result
		volumes []string
		after   time.Duration
		drained time.Duration // when the drain ended, after the start; 0: now
		policy  time.Duration
		ok      bool
		action  Action
		msg     string
	}{
		{name: "drained, nothing attached", res: done, after: time.Minute, policy: 10 * time.Minute, ok: true},
		{name: "blocked within the policy timeout", res: blocked, after: time.Minute, policy: 10 * time.Minute, action: ActWait,
			msg: "step 3/6: draining node n1: pod a/web: eviction blocked by PodDisruptionBudget a/web (budget)"},
		{name: "blocked past the policy timeout fails", res: blocked, after: 11 * time.Minute, policy: 10 * time.Minute, action: ActReportFailure,
			msg: "did not finish within 10m0s"},
		{name: "the Machine's drain timeout waits, never fails", md: MachineDrain{DrainTimeout: time.Hour}, res: blocked, after: 11 * time.Minute, policy: 10 * time.Minute,
			action: ActWait, msg: "the Machine's nodeDrainTimeoutSeconds ends the drain after 1h0m0s"},
		{name: "drained, volumes attached: wait", res: done, volumes: vols, after: time.Minute, policy: 10 * time.Minute, action: ActWait,
			msg: "step 3/6: waiting for the volumes of node n1 to detach: PersistentVolume pv-1 (and 1 more) is still attached"},
		{name: "volumes past the policy timeout fail", res: done, volumes: vols, after: 11 * time.Minute, policy: 10 * time.Minute, action: ActReportFailure,
			msg: "volumes did not detach within 10m0s"},
		{name: "the Machine's volume timeout: wait before it", md: MachineDrain{VolumeDetachTimeout: time.Hour}, res: done, volumes: vols, after: 11 * time.Minute, policy: 10 * time.Minute, action: ActWait},
		{name: "the Machine's volume timeout passed: go on", md: MachineDrain{VolumeDetachTimeout: time.Minute}, res: done, volumes: vols, drained: time.Minute, after: 2 * time.Minute, policy: 10 * time.Minute, ok: true},
		// Cluster API counts nodeVolumeDetachTimeoutSeconds from the drain's end: a
		// long drain does not eat the volumes' time.
		{name: "the Machine's volume timeout counts from the drain's end", md: MachineDrain{VolumeDetachTimeout: 10 * time.Minute}, res: done, volumes: vols,
			drained: 50 * time.Minute, after: 55 * time.Minute, action: ActWait, msg: "waiting for the volumes of node n1 to detach"},
		{name: "the Machine's volume timeout passed since the drain's end: go on", md: MachineDrain{VolumeDetachTimeout: 10 * time.Minute}, res: done, volumes: vols,
			drained: 50 * time.Minute, after: 60 * time.Minute, ok: true},
		{name: "volume wait skipped by annotation", md: MachineDrain{SkipVolumeDetach: true}, res: done, volumes: vols, after: time.Second, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			drained := start.Add(tt.after) // the drain just ended
			if tt.drained > 0 {
				drained = start.Add(tt.drained)
			}
			d, ok := DrainMachineVerdict("n1", tt.md, tt.res, tt.volumes, start, drained, start.Add(tt.after), tt.policy)
			g.Expect(ok).To(Equal(tt.ok))
			if tt.ok {
				return
			}
			g.Expect(d.Action).To(Equal(tt.action))
			g.Expect(d.Message).To(ContainSubstring(tt.msg))
		})
	}
}

// TestDrainedAt: the drain mark counts for the update it was written in, never
// for a later one.
func TestDrainedAt(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	node := func(v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{inplacev1.DrainedAnnotation: v}}}
	}
	g.Expect(drainedAt(node("2026-12-01T10:05:00Z"), start)).To(Equal(start.Add(5 * time.Minute)))
	g.Expect(drainedAt(node("2026-12-01T10:00:00Z"), start)).To(Equal(start), "drained in the update's first second")
	g.Expect(drainedAt(node("2026-12-01T09:59:59Z"), start).IsZero()).To(BeTrue(), "an earlier update's mark")
	g.Expect(drainedAt(node("yesterday"), start).IsZero()).To(BeTrue())
	g.Expect(drainedAt(&corev1.Node{}, start).IsZero()).To(BeTrue())
	g.Expect(drainedAt(node("2026-12-01T10:05:00Z"), time.Time{}).IsZero()).To(BeTrue(), "no update in flight")
}

func TestMachineDrainOver(t *testing.T) {
	g := NewWithT(t)
	g.Expect(MachineDrain{}.DrainOver(time.Hour)).To(BeFalse(), "no Machine timeout: the policy decides")
	g.Expect(MachineDrain{Excluded: true}.DrainOver(0)).To(BeTrue())
	g.Expect(MachineDrain{DrainTimeout: time.Minute}.DrainOver(59 * time.Second)).To(BeFalse())
	g.Expect(MachineDrain{DrainTimeout: time.Minute}.DrainOver(time.Minute)).To(BeTrue())
}
