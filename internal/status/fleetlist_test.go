package status

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestBuildFleetList(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	cluster := func(ns, name string, reason string, annotations map[string]string) clusterv1.Cluster {
		c := clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations}}
		if reason != "" {
			c.Status.Conditions = []metav1.Condition{{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: reason,
				Message: "held by " + reason, LastTransitionTime: metav1.NewTime(now.Add(-90 * time.Second))}}
		}
		return c
	}
	machine := func(ns, cluster, name, version, kubelet string, conds ...metav1.Condition) clusterv1.Machine {
		return clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cluster}},
			Spec:       clusterv1.MachineSpec{ClusterName: cluster, Version: version},
			Status:     clusterv1.MachineStatus{NodeInfo: &corev1.NodeSystemInfo{KubeletVersion: kubelet}, Conditions: conds},
		}
	}
	image := func(img string, m clusterv1.Machine) clusterv1.Machine {
		m.Status.NodeInfo.OSImage = img
		return m
	}
	gone := func(m clusterv1.Machine) clusterv1.Machine {
		m.DeletionTimestamp = &metav1.Time{Time: now}
		return m
	}
	// staged: the coordinator's phase record says the update is staged ahead of
	// a closed window (machinestate.Staged), while Cluster API updates the Machine.
	staged := func(m clusterv1.Machine) clusterv1.Machine {
		m.Annotations = map[string]string{inplacev1.UpdatePhaseAnnotation: protocol.PhaseRecord{Plan: "h1", Phase: protocol.UpdatePhaseStaged,
			Start: now.Add(-time.Hour), Since: now.Add(-time.Hour)}.Encode()}
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue,
			Reason: clusterv1.MachineInPlaceUpdatingReason, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))})
		return m
	}
	updating := metav1.Condition{Type: clusterv1.MachineUpdatingCondition, Status: metav1.ConditionTrue, Reason: clusterv1.MachineInPlaceUpdatingReason}
	deadline := metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionFalse, Reason: inplacev1.ReasonDeadlineExceeded, Message: "phase Applying passed its deadline"}

	clusters := []clusterv1.Cluster{
		cluster("b", "window", inplacev1.ReasonWindowClosed, nil),
		cluster("b", "waiting-done", inplacev1.ReasonWindowClosed, nil),
		cluster("a", "rolling", "", nil),
		cluster("a", "stuck", "", nil),
		cluster("a", "behind", "", nil),
		cluster("a", "halted", inplacev1.ReasonHalted, nil),
		cluster("a", "empty", "", nil),
		cluster("a", "scaling", "", nil),
		cluster("a", "unreported", "", nil),
		cluster("a", "draining", "", nil),
		cluster("c", "staged", inplacev1.ReasonWindowClosed, map[string]string{inplacev1.MaintenanceWindowsAnnotation: "Mon 02:00-06:00 UTC"}),
		cluster("c", "staged-policy", inplacev1.ReasonWindowClosed, nil),
		cluster("c", "staging", inplacev1.ReasonWindowClosed, nil),
	}
	machines := []clusterv1.Machine{
		machine("b", "window", "w1", "v1.36.0", "v1.35.0"),
		// The node writes its OS image: the table cleans it of control characters.
		image("Edge\tOS 2026.12", machine("b", "waiting-done", "wd1", "v1.36.0", "v1.36.0")),
		// An image switch rolling with the version: every image the nodes report.
		image("edge-os-2026.12", machine("a", "rolling", "r1", "v1.36.0", "v1.36.0")),
		image("edge-os-2026.06", machine("a", "rolling", "r2", "v1.36.0", "v1.35.0", updating)),
		image("edge-os-2026.06", machine("a", "rolling", "r3", "v1.35.0", "v1.35.0")),
		machine("a", "stuck", "s1", "v1.36.0", "v1.35.0", deadline),
		machine("a", "behind", "b1", "v1.36.0", "v1.35.0"),
		machine("a", "halted", "h1", "v1.36.0", "v1.35.0"),
		machine("a", "scaling", "sc1", "v1.36.0", "v1.36.0"),
		// Going away: neither work left nor proof, so not counted.
		gone(machine("a", "scaling", "sc2", "v1.35.0", "v1.35.0")),
		// No kubelet version reported: nothing proves the node runs v1.36.0.
		machine("a", "unreported", "u1", "v1.36.0", ""),
		// A blocked drain is an update in progress, named in the message.
		machine("a", "draining", "d1", "v1.36.0", "v1.35.0", metav1.Condition{Type: inplacev1.InPlaceUpdateCondition, Status: metav1.ConditionTrue,
			Reason: inplacev1.ReasonDrainBlocked, Message: "PodDisruptionBudget pos/till refuses the eviction of pod pos/till-0"}),
		// Staged ahead of the window; the other Machine not started by Cluster API yet.
		staged(machine("c", "staged", "st1", "v1.36.0", "v1.35.0")),
		machine("c", "staged", "st2", "v1.36.0", "v1.35.0"),
		// The window is the policy's: the coordinator's message says when it opens.
		staged(machine("c", "staged-policy", "sp1", "v1.36.0", "v1.35.0")),
		// One staged, one still downloading: work under way, not waiting.
		staged(machine("c", "staging", "sg1", "v1.36.0", "v1.35.0")),
		machine("c", "staging", "sg2", "v1.36.0", "v1.35.0", updating),
		// A Machine of a Cluster not listed (another selector) is ignored.
		machine("a", "elsewhere", "e1", "v1.36.0", "v1.35.0", deadline),
	}
	l := BuildFleetList(clusters, machines, now)

	type row struct {
		name, state        string
		versions, images   []string
		upToDate, machines int
	}
	var got []row
	for _, c := range l.Clusters {
		got = append(got, row{c.Namespace + "/" + c.Name, c.State, c.Versions, c.OSImages, c.UpToDate, c.Machines})
	}
	g := NewWithT(t)
	g.Expect(got).To(Equal([]row{
		{"a/behind", ClusterOutdated, []string{"v1.36.0"}, []string{}, 0, 1},
		{"a/draining", ClusterUpdating, []string{"v1.36.0"}, []string{}, 0, 1},
		{"a/empty", ClusterUpToDate, []string{}, []string{}, 0, 0},
		{"a/halted", FleetHalted, []string{"v1.36.0"}, []string{}, 0, 1},
		{"a/rolling", ClusterUpdating, []string{"v1.35.0", "v1.36.0"}, []string{"edge-os-2026.06", "edge-os-2026.12"}, 2, 3},
		{"a/scaling", ClusterUpToDate, []string{"v1.36.0"}, []string{}, 1, 1},
		{"a/stuck", ClusterFailed, []string{"v1.36.0"}, []string{}, 0, 1},
		{"a/unreported", ClusterOutdated, []string{"v1.36.0"}, []string{}, 0, 1},
		// A closed window holds only a Cluster with work left.
		{"b/waiting-done", ClusterUpToDate, []string{"v1.36.0"}, []string{"Edge\tOS 2026.12"}, 1, 1},
		{"b/window", FleetWindowClosed, []string{"v1.36.0"}, []string{}, 0, 1},
		{"c/staged", ClusterStaged, []string{"v1.36.0"}, []string{}, 0, 2},
		{"c/staged-policy", ClusterStaged, []string{"v1.36.0"}, []string{}, 0, 1},
		{"c/staging", ClusterUpdating, []string{"v1.36.0"}, []string{}, 0, 2},
	}))
	g.Expect(l.Summary).To(Equal(FleetSummary{Clusters: 13, UpToDate: 3, Updating: 3, Failed: 1, Outdated: 2, Held: 2, Staged: 2}))
	monday := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	g.Expect(l.Clusters[10].Message).To(Equal("1 of 2 Machines staged; window opens 2026-12-07T02:00:00Z"))
	g.Expect(l.Clusters[10].NextOpening).To(Equal(&monday))
	g.Expect(l.Clusters[10].Staged).To(Equal(1))
	g.Expect(l.Clusters[10].Updating).To(Equal(1), "staged Machines are updating too")
	g.Expect(l.Clusters[11].Message).To(Equal("1 of 1 Machines staged, waiting for a maintenance window (held by " + inplacev1.ReasonWindowClosed + ")"))
	g.Expect(l.Clusters[11].NextOpening).To(BeNil(), "the policy's windows are not in the management cluster")
	g.Expect(l.Clusters[12].Message).To(Equal("2 of 2 Machines updating"))
	g.Expect(l.Clusters[1].Message).To(Equal("1 of 1 Machines updating; Machine d1: DrainBlocked: PodDisruptionBudget pos/till refuses the eviction of pod pos/till-0"))
	g.Expect(l.Clusters[6].Message).To(Equal("Machine s1: InPlaceUpdateDeadlineExceeded: phase Applying passed its deadline"))

	var buf bytes.Buffer
	g.Expect(RenderFleetTable(&buf, l, now)).To(Succeed())
	g.Expect(buf.String()).To(HavePrefix("13 clusters: 3 up to date, 3 updating, 2 staged, 1 failed, 2 outdated, 2 held\n\nNAMESPACE"))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^NAMESPACE\s+CLUSTER\s+VERSION\s+OS-IMAGE\s+UP-TO-DATE\s+STATE\s+SINCE\s+MESSAGE$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^b\s+window\s+v1\.36\.0\s+-\s+0/1\s+WindowClosed\s+1m30s\s+held by ` + inplacev1.ReasonWindowClosed + `$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^a\s+rolling\s+v1\.35\.0,v1\.36\.0\s+edge-os-2026\.06,edge-os-2026\.12\s+2/3\s+Updating\s+-\s+1 of 3 Machines updating$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^c\s+staged\s+v1\.36\.0\s+-\s+0/2\s+Staged\s+1m30s\s+1 of 2 Machines staged; window opens 2026-12-07T02:00:00Z$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^b\s+waiting-done\s+v1\.36\.0\s+Edge OS 2026\.12\s+1/1\s+UpToDate\s`))
}
