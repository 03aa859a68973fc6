package status

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

// PoolResolver returns the fleet controls of a Machine's pool by the Machine's
// namespace and labels; *policy.Policy implements it (the extension's policy
// file, loaded by cli.LoadPolicy, so status and the coordinator resolve alike).
type PoolResolver interface {
	FleetPool(namespace string, machineLabels map[string]string) fleet.Pool
}

// Sources of PoolView.WindowsSource.
const (
	WindowsFromPolicy     = "policy"
	WindowsFromAnnotation = "annotation"
)

// PoolView is one fleet pool of a Cluster (docs/fleet-controls.md): the policy's
// budget and windows for the pool, with the failures the Cluster's fleet record
// holds against it. It decides as the coordinator's gate does before a node of
// the pool starts (fleet.Gate, with the failures fleet.Counted keeps: not those
// whose owner's spec changed since), except that a node's own failure does not
// hold that node, which a per-pool line cannot show.
type PoolView struct {
	// Name is the policy's fleet entry; "" is the pool of the Machines no entry
	// selects (budget 1, no windows, no soak).
	Name string `json:"name"`
	// Machines are the Cluster's Machines in the pool, sorted.
	Machines []string `json:"machines"`
	// FailureBudget is how many failed nodes halt the pool; 0: no budget.
	FailureBudget int `json:"failureBudget"`
	// Failures is how many failed nodes the Cluster's fleet record holds against
	// the pool that still count (fleet.Counted: a failure stops counting once its
	// Machine's MachineDeployment or control plane has a new spec, or is gone);
	// BudgetSpent is true when they reach a non-zero FailureBudget: new node
	// updates of the pool halt until the Cluster is annotated with resume or the
	// spec changes.
	Failures    int  `json:"failures"`
	BudgetSpent bool `json:"budgetSpent"`
	// Windows are the pool's maintenance windows: the Cluster's annotation when it
	// has one (WindowsSource "annotation"), else the policy's ("policy"); empty:
	// always open.
	Windows       []string `json:"windows,omitempty"`
	WindowsSource string   `json:"windowsSource,omitempty"`
	// WindowOpen: a node update of ExpectedSeconds may start now (a window is open
	// and lasts long enough, or there are no windows). WindowCloses is when the
	// open window closes; NextOpening the start of the next opening long enough
	// (nil when WindowOpen, or when none within a week is). WindowError: the
	// windows do not parse, and the coordinator holds every node of the pool.
	WindowOpen   bool       `json:"windowOpen"`
	WindowCloses *time.Time `json:"windowCloses,omitempty"`
	NextOpening  *time.Time `json:"nextOpening,omitempty"`
	WindowError  string     `json:"windowError,omitempty"`
	// DownloadWindows are the pool's download windows (when a node update a closed
	// maintenance window holds may begin staging ahead of it): the Cluster's
	// download-windows annotation when it has one (DownloadWindowsSource
	// "annotation"), else the policy's ("policy"); empty: any time.
	// DownloadWindowOpen and DownloadNextOpening say whether staging may begin now
	// and when it may next (nil without download windows); DownloadWindowError:
	// they do not parse, and the coordinator holds every download of the pool.
	DownloadWindows       []string   `json:"downloadWindows,omitempty"`
	DownloadWindowsSource string     `json:"downloadWindowsSource,omitempty"`
	DownloadWindowOpen    *bool      `json:"downloadWindowOpen,omitempty"`
	DownloadNextOpening   *time.Time `json:"downloadNextOpening,omitempty"`
	DownloadWindowError   string     `json:"downloadWindowError,omitempty"`
	// ExpectedSeconds is the expected length of the pool's next node update: the
	// longest measured on the Cluster, or the policy's expectedDurationSeconds.
	ExpectedSeconds int64 `json:"expectedSeconds"`
	// SoakSeconds is the policy's soak between nodes of the pool.
	SoakSeconds int64 `json:"soakSeconds,omitempty"`
}

// BuildWithPools is Build with a pool line per fleet pool of each Cluster
// (ClusterView.Pools), resolved from the policy. Build alone leaves Pools nil.
func BuildWithPools(s Snapshot, now time.Time, pools PoolResolver) Report {
	r := Build(s, now)
	if pools == nil {
		return r
	}
	byKey := make(map[string]*ClusterSnapshot, len(s.Clusters))
	for i := range s.Clusters {
		c := &s.Clusters[i].Cluster
		byKey[c.Namespace+"/"+c.Name] = &s.Clusters[i]
	}
	for i := range r.Clusters {
		cv := &r.Clusters[i]
		if cs, ok := byKey[cv.Namespace+"/"+cv.Name]; ok {
			cv.Pools = buildPools(&cs.Cluster, cs.Machines, cs.OwnerSpecs, pools, now)
		}
	}
	return r
}

// buildPools groups the Cluster's Machines by fleet pool and judges each pool.
// The result is never nil, so that -o json shows "pools": [] with a policy.
func buildPools(c *clusterv1.Cluster, machines []clusterv1.Machine, owners map[string]string, pools PoolResolver, now time.Time) []PoolView {
	st, _ := fleet.Decode(c.Annotations[inplacev1.FleetStateAnnotation]) // a corrupt record shows as FleetView.RecordError
	type group struct {
		pool     fleet.Pool
		machines []string
	}
	groups := map[string]*group{}
	for _, m := range machines {
		p := pools.FleetPool(m.Namespace, m.Labels)
		g, ok := groups[p.Name]
		if !ok {
			g = &group{pool: p}
			groups[p.Name] = g
		}
		g.machines = append(g.machines, m.Name)
	}
	out := make([]PoolView, 0, len(groups))
	for _, g := range groups {
		slices.Sort(g.machines)
		out = append(out, poolView(c, st, owners, g.pool, g.machines, now))
	}
	slices.SortFunc(out, func(a, b PoolView) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func poolView(c *clusterv1.Cluster, st fleet.State, owners map[string]string, p fleet.Pool, machines []string, now time.Time) PoolView {
	expected := st.ExpectedDuration(p.ExpectedDuration)
	pv := PoolView{
		Name:            p.Name,
		Machines:        machines,
		FailureBudget:   max(int(p.Budget), 0),
		ExpectedSeconds: seconds(expected),
		SoakSeconds:     seconds(p.Soak),
	}
	// The coordinator's rule (fleet.Counted): a failure stops counting once its owner's spec changed.
	pv.Failures = len(fleet.Counted(st.Failures, p.Name, func(o string) (string, bool) { v, ok := owners[o]; return v, ok }))
	pv.BudgetSpent = pv.FailureBudget > 0 && pv.Failures >= pv.FailureBudget

	downloadWindows(&pv, c, p, now)

	// The coordinator's rule (fleet.PoolWindows): the Cluster's annotation replaces the policy's windows.
	annotation, annotated := c.Annotations[inplacev1.MaintenanceWindowsAnnotation]
	sched, fromAnnotation, err := fleet.PoolWindows(p.Windows, annotation, annotated)
	switch {
	case fromAnnotation:
		pv.WindowsSource = WindowsFromAnnotation
	case len(sched) > 0:
		pv.WindowsSource = WindowsFromPolicy
	}
	if err != nil {
		pv.Windows, pv.WindowError = []string{annotation}, err.Error()
		return pv
	}
	for _, w := range sched {
		pv.Windows = append(pv.Windows, w.String())
	}
	v := sched.At(now, expected)
	pv.WindowOpen = v.Start
	if v.Open && len(sched) > 0 {
		closes := v.Closes.UTC()
		pv.WindowCloses = &closes
	}
	if !v.Start && !v.NextOpening.IsZero() {
		next := v.NextOpening.UTC()
		pv.NextOpening = &next
	}
	return pv
}

// downloadWindows fills the pool's download windows by the coordinator's rule
// (fleet.PoolWindows, as clusterDownloadWindows): the Cluster's annotation
// replaces the policy's; staging may begin at once inside one, no expected
// length asked.
func downloadWindows(pv *PoolView, c *clusterv1.Cluster, p fleet.Pool, now time.Time) {
	annotation, annotated := c.Annotations[inplacev1.DownloadWindowsAnnotation]
	sched, fromAnnotation, err := fleet.PoolWindows(p.DownloadWindows, annotation, annotated)
	switch {
	case err != nil:
		pv.DownloadWindows, pv.DownloadWindowError = []string{annotation}, err.Error()
		pv.DownloadWindowsSource = WindowsFromAnnotation
		return
	case len(sched) == 0:
		return // any time
	case fromAnnotation:
		pv.DownloadWindowsSource = WindowsFromAnnotation
	default:
		pv.DownloadWindowsSource = WindowsFromPolicy
	}
	for _, w := range sched {
		pv.DownloadWindows = append(pv.DownloadWindows, w.String())
	}
	v := sched.At(now, 0)
	open := v.Start
	pv.DownloadWindowOpen = &open
	if !v.Start && !v.NextOpening.IsZero() {
		next := v.NextOpening.UTC()
		pv.DownloadNextOpening = &next
	}
}

// renderPools writes one line per fleet pool; wide adds the windows, the
// expected duration, the soak and the pool's Machines.
func renderPools(buf *bytes.Buffer, pools []PoolView, wide bool) {
	for _, p := range pools {
		name := p.Name
		if name == "" {
			name = "(default)"
		}
		n := "machines"
		if len(p.Machines) == 1 {
			n = "machine"
		}
		fmt.Fprintf(buf, "  pool %s: %d %s; %s; %s", name, len(p.Machines), n, budgetCell(p), windowCell(p))
		if s := downloadCell(p); s != "" {
			buf.WriteString("; " + s)
		}
		if wide {
			if len(p.Windows) > 0 {
				fmt.Fprintf(buf, "; windows (%s) %q", p.WindowsSource, strings.Join(p.Windows, "; "))
			}
			fmt.Fprintf(buf, "; expected %s", FormatSeconds(p.ExpectedSeconds))
			if p.SoakSeconds > 0 {
				fmt.Fprintf(buf, "; soak %s", FormatSeconds(p.SoakSeconds))
			}
			fmt.Fprintf(buf, "; %s", strings.Join(p.Machines, ", "))
		}
		buf.WriteByte('\n')
	}
}

func budgetCell(p PoolView) string {
	if p.FailureBudget == 0 {
		return fmt.Sprintf("no failure budget (%d failure(s) recorded)", p.Failures)
	}
	s := fmt.Sprintf("budget %d of %d spent", p.Failures, p.FailureBudget)
	if p.BudgetSpent {
		s += ", halted (annotate the Cluster with " + inplacev1.ResumeAnnotation + " to continue)"
	}
	return s
}

// downloadCell is the pool's download windows' state; "" without any (staging
// ahead may begin at any time).
func downloadCell(p PoolView) string {
	switch {
	case p.DownloadWindowError != "":
		return "download windows invalid, every download held: " + p.DownloadWindowError
	case len(p.DownloadWindows) == 0:
		return ""
	case p.DownloadWindowOpen != nil && *p.DownloadWindowOpen:
		return "download window open"
	case p.DownloadNextOpening != nil:
		return "download window closed, next opening " + p.DownloadNextOpening.Format(time.RFC3339)
	}
	return "download window closed"
}

func windowCell(p PoolView) string {
	expected := FormatSeconds(p.ExpectedSeconds)
	switch {
	case p.WindowError != "":
		return "windows invalid, every node held: " + p.WindowError
	case len(p.Windows) == 0:
		return "window always open"
	case p.WindowOpen:
		return "window open, closes " + p.WindowCloses.Format(time.RFC3339)
	}
	s := "window closed"
	if p.WindowCloses != nil {
		s = fmt.Sprintf("window open but closes %s, before the expected %s would end", p.WindowCloses.Format(time.RFC3339), expected)
	}
	if p.NextOpening != nil {
		return s + ", next opening " + p.NextOpening.Format(time.RFC3339)
	}
	return s + ", no opening within a week is long enough for the expected " + expected
}
