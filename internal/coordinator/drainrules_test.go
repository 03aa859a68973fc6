package coordinator

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

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
		{name: "the Machine's volume timeout passed: go on", md: MachineDrain{VolumeDetachTimeout: time.Minute}, res: done, volumes: vols, after: 2 * time.Minute, policy: 10 * time.Minute, ok: true},
		{name: "volume wait skipped by annotation", md: MachineDrain{SkipVolumeDetach: true}, res: done, volumes: vols, after: time.Second, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d, ok := DrainMachineVerdict("n1", tt.md, tt.res, tt.volumes, start, start.Add(tt.after), tt.policy)
			g.Expect(ok).To(Equal(tt.ok))
			if tt.ok {
				return
			}
			g.Expect(d.Action).To(Equal(tt.action))
			g.Expect(d.Message).To(ContainSubstring(tt.msg))
		})
	}
}

func TestMachineDrainOver(t *testing.T) {
	g := NewWithT(t)
	g.Expect(MachineDrain{}.DrainOver(time.Hour)).To(BeFalse(), "no Machine timeout: the policy decides")
	g.Expect(MachineDrain{Excluded: true}.DrainOver(0)).To(BeTrue())
	g.Expect(MachineDrain{DrainTimeout: time.Minute}.DrainOver(59 * time.Second)).To(BeFalse())
	g.Expect(MachineDrain{DrainTimeout: time.Minute}.DrainOver(time.Minute)).To(BeTrue())
}
