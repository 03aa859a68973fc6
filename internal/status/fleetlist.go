package status

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/machinestate"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// maxFleetMessage bounds a table row's message (bytes); -o json has it whole.
const maxFleetMessage = 80

// maxFleetOSImages bounds a table row's OS images (bytes): the nodes write them, so
// the table also cleans them of control characters; -o json has them whole.
const maxFleetOSImages = 60

// FleetListKind is the kind of `fleet status -o json`'s document (same apiVersion
// as the status report).
const FleetListKind = "InPlaceFleetStatus"

// States of a FleetLine, one rule for every Cluster (clusterState) over one rule for
// every Machine (machinestate.Of, which the FleetRollout controller shares).
const (
	// ClusterUpToDate: every Machine's node reported the version it asks for and
	// none is being updated.
	ClusterUpToDate = "UpToDate"
	// ClusterUpdating: at least one Machine is being updated in place (its drain
	// may be blocked: the Machine's status says so).
	ClusterUpdating = "Updating"
	// ClusterFailed: at least one Machine's last in-place update failed (rolled
	// back, failed, degraded, never picked up, past a deadline).
	ClusterFailed = "Failed"
	// ClusterOutdated: a Machine's node does not run the version the Machine asks
	// for, or has not reported a kubelet version, and nothing is updating it yet.
	ClusterOutdated = "Outdated"
	// ClusterStaged: the Cluster's update is staged on its nodes ahead of a closed
	// maintenance window and waits for it; nothing else of it is under way
	// (machinestate.StagedAndWaiting). The window will only switch the nodes.
	ClusterStaged = "Staged"
)

// FleetList is `fleet status`: one line per Cluster, read from the management
// cluster alone (Clusters and Machines; no workload cluster is dialled), so that it
// answers for a thousand clusters in one pair of list calls. Its JSON field names
// are a stable interface: fields are only ever added.
type FleetList struct {
	APIVersion  string       `json:"apiVersion"`
	Kind        string       `json:"kind"`
	GeneratedAt time.Time    `json:"generatedAt"`
	Summary     FleetSummary `json:"summary"`
	Clusters    []FleetLine  `json:"clusters"`
}

// FleetSummary counts the Clusters of a FleetList by state. Held counts those the
// fleet controls hold (Paused, Halted, WindowClosed, Soaking) with work left;
// Staged those staged and waiting for a maintenance window.
type FleetSummary struct {
	Clusters int `json:"clusters"`
	UpToDate int `json:"upToDate"`
	Updating int `json:"updating"`
	Failed   int `json:"failed"`
	Outdated int `json:"outdated"`
	Held     int `json:"held"`
	Staged   int `json:"staged"`
}

// FleetLine is one Cluster.
type FleetLine struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Versions are the Kubernetes versions the Cluster's Machines ask for, sorted:
	// one while no update is rolling, two while one is.
	Versions []string `json:"versions"`
	// OSImages are the OS images the Cluster's nodes report (Node
	// status.nodeInfo.osImage, as Cluster API copies it onto each Machine), sorted:
	// one when every node runs the same, more while an image switch rolls; empty
	// while no node has reported.
	OSImages []string `json:"osImages"`
	// Machines counts the Cluster's Machines but those being deleted; UpToDate
	// those whose node reported the version the Machine asks for with no update in
	// progress; Updating those Cluster API or capi-inplace is updating (a blocked
	// drain included); Failed as the state says (machinestate.Of judges each).
	Machines int `json:"machines"`
	UpToDate int `json:"upToDate"`
	Updating int `json:"updating"`
	Failed   int `json:"failed"`
	// Staged counts, of Updating, the Machines whose update is staged on the node
	// ahead of a closed maintenance window and waits for it (machinestate.Staged).
	Staged int `json:"staged"`
	// State is UpToDate, Updating, Staged, Failed or Outdated (clusterState), or
	// the fleet controls' Paused, Halted, WindowClosed or Soaking when they hold
	// work back.
	State string `json:"state"`
	// NextOpening is when the Cluster's maintenance window opens next, while it is
	// closed and the Cluster's own maintenance-windows annotation says so (the
	// policy's windows are not in the management cluster: the message then
	// carries the coordinator's word).
	NextOpening *time.Time `json:"nextOpening,omitempty"`
	// Message says why, for any State but UpToDate.
	Message string `json:"message,omitempty"`
	// Since is when the Cluster's InPlaceUpdate condition last changed, when it has one.
	Since *time.Time `json:"since,omitempty"`
}

// Held reports whether the fleet controls hold the Cluster's work back.
func (l FleetLine) Held() bool {
	switch l.State {
	case FleetPaused, FleetHalted, FleetWindowClosed, FleetSoaking:
		return true
	}
	return false
}

// BuildFleetList makes the fleet list of clusters from their Machines (any order;
// matched by namespace and cluster label), sorted by namespace and name.
func BuildFleetList(clusters []clusterv1.Cluster, machines []clusterv1.Machine, now time.Time) FleetList {
	byCluster := map[string][]clusterv1.Machine{}
	for _, m := range machines {
		k := m.Namespace + "/" + m.Labels[clusterv1.ClusterNameLabel]
		byCluster[k] = append(byCluster[k], m)
	}
	l := FleetList{APIVersion: ReportAPIVersion, Kind: FleetListKind, GeneratedAt: now.UTC(), Clusters: []FleetLine{}}
	for i := range clusters {
		c := &clusters[i]
		line := fleetLine(c, byCluster[c.Namespace+"/"+c.Name], now)
		l.Clusters = append(l.Clusters, line)
		l.Summary.Clusters++
		switch {
		case line.Held():
			l.Summary.Held++
		case line.State == ClusterUpToDate:
			l.Summary.UpToDate++
		case line.State == ClusterUpdating:
			l.Summary.Updating++
		case line.State == ClusterFailed:
			l.Summary.Failed++
		case line.State == ClusterOutdated:
			l.Summary.Outdated++
		case line.State == ClusterStaged:
			l.Summary.Staged++
		}
	}
	slices.SortFunc(l.Clusters, func(a, b FleetLine) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return l
}

func fleetLine(c *clusterv1.Cluster, machines []clusterv1.Machine, now time.Time) FleetLine {
	line := FleetLine{Namespace: c.Namespace, Name: c.Name, Versions: []string{}, OSImages: []string{}}
	var failure, blocked, waiting string
	var states []machinestate.State
	for i := range machines {
		m := &machines[i]
		v := machinestate.Of(m)
		states = append(states, v.State)
		if v.State == machinestate.Deleting {
			continue // going away: neither work left nor proof (machinestate)
		}
		line.Machines++
		if ver := m.Spec.Version; ver != "" && !slices.Contains(line.Versions, ver) {
			line.Versions = append(line.Versions, ver)
		}
		if ni := m.Status.NodeInfo; ni != nil && ni.OSImage != "" && !slices.Contains(line.OSImages, ni.OSImage) {
			line.OSImages = append(line.OSImages, ni.OSImage)
		}
		switch {
		case v.State == machinestate.Failed:
			line.Failed++
			if failure == "" {
				failure = fmt.Sprintf("Machine %s: %s: %s", m.Name, v.Reason, v.Message)
			}
		case v.State.InProgress():
			line.Updating++
			if v.State == machinestate.Staged {
				line.Staged++
			}
			if v.State == machinestate.DrainBlocked && blocked == "" {
				blocked = fmt.Sprintf("Machine %s: %s: %s", m.Name, v.Reason, v.Message)
			}
			if v.State == machinestate.WaitingForControlPlane && waiting == "" {
				waiting = fmt.Sprintf("Machine %s: %s: %s", m.Name, v.Reason, v.Message)
			}
		case v.State == machinestate.UpToDate:
			line.UpToDate++
		}
	}
	slices.Sort(line.Versions)
	slices.Sort(line.OSImages)
	if cond := meta.FindStatusCondition(c.Status.Conditions, inplacev1.InPlaceUpdateCondition); cond != nil {
		t := cond.LastTransitionTime.UTC()
		line.Since = &t
	}
	fv := buildFleet(c, machines, now)
	// A blocked drain may need a human; a worker waiting for the control plane is
	// named when nothing is blocked.
	line.State, line.Message = clusterState(line, failure, cmp.Or(blocked, waiting), machinestate.StagedAndWaiting(states), fv)
	if line.State == ClusterStaged || line.State == FleetWindowClosed {
		line.NextOpening = fv.NextOpening
	}
	return line
}

// clusterState is the one rule for a Cluster's state in the fleet list: a failure
// first (it needs a human), then what the fleet controls hold back, then an
// update staged and waiting for its window (staged: machinestate.StagedAndWaiting),
// then progress. A blocked drain is progress that may need a human too, so its
// Machine is named.
func clusterState(l FleetLine, failure, blocked string, staged bool, fv FleetView) (state, message string) {
	work := l.UpToDate < l.Machines
	switch {
	case l.Failed > 0:
		return ClusterFailed, failure
	case fv.State == FleetHalted || fv.State == FleetPaused:
		return fv.State, fv.Message
	case staged:
		return ClusterStaged, stagedMessage(l, fv)
	case l.Updating > 0 && blocked != "":
		return ClusterUpdating, fmt.Sprintf("%d of %d Machines updating; %s", l.Updating, l.Machines, blocked)
	case l.Updating > 0:
		return ClusterUpdating, fmt.Sprintf("%d of %d Machines updating", l.Updating, l.Machines)
	case work && (fv.State == FleetWindowClosed || fv.State == FleetSoaking):
		return fv.State, fv.Message
	case work:
		return ClusterOutdated, fmt.Sprintf("%d of %d Machines not at the version they ask for", l.Machines-l.UpToDate, l.Machines)
	}
	return ClusterUpToDate, ""
}

// stagedMessage says how many Machines are staged and when the window opens, as
// far as the management cluster knows it: the Cluster's maintenance-windows
// annotation, else the coordinator's message on the Cluster's condition.
func stagedMessage(l FleetLine, fv FleetView) string {
	if fv.NextOpening != nil {
		return fmt.Sprintf("%d of %d Machines staged; window opens %s", l.Staged, l.Machines, fv.NextOpening.Format(time.RFC3339))
	}
	msg := fmt.Sprintf("%d of %d Machines staged, waiting for a maintenance window", l.Staged, l.Machines)
	if fv.State == FleetWindowClosed {
		return msg + " (" + fv.Message + ")"
	}
	return msg
}

// RenderFleetTable writes the fleet list as a summary line and one row per Cluster.
func RenderFleetTable(w io.Writer, l FleetList, now time.Time) error {
	var buf bytes.Buffer
	s := l.Summary
	fmt.Fprintf(&buf, "%d clusters: %d up to date, %d updating, %d staged, %d failed, %d outdated, %d held\n\n",
		s.Clusters, s.UpToDate, s.Updating, s.Staged, s.Failed, s.Outdated, s.Held)
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tCLUSTER\tVERSION\tOS-IMAGE\tUP-TO-DATE\tSTATE\tSINCE\tMESSAGE")
	for _, c := range l.Clusters {
		since := "-"
		if c.Since != nil {
			since = FormatSeconds(int64(now.Sub(*c.Since) / time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", c.Namespace, c.Name, dash(strings.Join(c.Versions, ",")),
			dash(protocol.BoundText(strings.Join(c.OSImages, ","), maxFleetOSImages)), c.UpToDate, c.Machines, c.State, since, dash(protocol.BoundText(c.Message, maxFleetMessage)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}
