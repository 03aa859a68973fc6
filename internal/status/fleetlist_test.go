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
	}))
	g.Expect(l.Summary).To(Equal(FleetSummary{Clusters: 10, UpToDate: 3, Updating: 2, Failed: 1, Outdated: 2, Held: 2}))
	g.Expect(l.Clusters[1].Message).To(Equal("1 of 1 Machines updating; Machine d1: DrainBlocked: PodDisruptionBudget pos/till refuses the eviction of pod pos/till-0"))
	g.Expect(l.Clusters[6].Message).To(Equal("Machine s1: InPlaceUpdateDeadlineExceeded: phase Applying passed its deadline"))

	var buf bytes.Buffer
	g.Expect(RenderFleetTable(&buf, l, now)).To(Succeed())
	g.Expect(buf.String()).To(HavePrefix("10 clusters: 3 up to date, 2 updating, 1 failed, 2 outdated, 2 held\n\nNAMESPACE"))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^NAMESPACE\s+CLUSTER\s+VERSION\s+OS-IMAGE\s+UP-TO-DATE\s+STATE\s+SINCE\s+MESSAGE$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^b\s+window\s+v1\.36\.0\s+-\s+0/1\s+WindowClosed\s+1m30s\s+held by ` + inplacev1.ReasonWindowClosed + `$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^a\s+rolling\s+v1\.35\.0,v1\.36\.0\s+edge-os-2026\.06,edge-os-2026\.12\s+2/3\s+Updating\s+-\s+1 of 3 Machines updating$`))
	g.Expect(buf.String()).To(MatchRegexp(`(?m)^b\s+waiting-done\s+v1\.36\.0\s+Edge OS 2026\.12\s+1/1\s+UpToDate\s`))
}
