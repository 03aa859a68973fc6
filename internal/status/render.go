package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/fleet/machinestate"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// barWidth is the number of cells of a progress bar.
const barWidth = 10

// RenderJSON writes a document (the Report, the FleetList) as JSON: indented, or on
// one line (the form `status -o json --watch` prints, one document per line).
func RenderJSON(w io.Writer, r any, indent bool) error {
	var (
		b   []byte
		err error
	)
	if indent {
		b, err = json.MarshalIndent(r, "", "  ")
	} else {
		b, err = json.Marshal(r)
	}
	if err != nil {
		return fmt.Errorf("encode status report: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write status report: %w", err)
	}
	return nil
}

// RenderYAML writes a document (the Report, the FleetList) as YAML with the JSON
// document's field names (sigs.k8s.io/yaml), so that yq and jq read the same schema.
func RenderYAML(w io.Writer, r any) error {
	b, err := yaml.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode status report: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write status report: %w", err)
	}
	return nil
}

// RenderTable writes the Report as text: one block per Cluster, one row per Machine.
func RenderTable(w io.Writer, r Report) error {
	return renderTable(w, r, false)
}

// RenderWideTable is RenderTable with more columns (-o wide): the Node, Cluster API's
// Machine phase, the desired plan and when the agent last reported.
func RenderWideTable(w io.Writer, r Report) error {
	return renderTable(w, r, true)
}

func renderTable(w io.Writer, r Report, wide bool) error {
	var buf bytes.Buffer
	if len(r.Clusters) == 0 {
		where := "namespace " + r.Namespace
		if r.Namespace == "" {
			where = "any namespace"
		}
		fmt.Fprintf(&buf, "No clusters found in %s.\n", where)
	}
	for i, c := range r.Clusters {
		if i > 0 {
			buf.WriteByte('\n')
		}
		renderCluster(&buf, c, wide)
	}
	if len(r.Clusters) > 0 {
		fmt.Fprintf(&buf, "\n%d machines: %d in progress, %d failed", r.Summary.Machines, r.Summary.InProgress, r.Summary.Failed)
		if r.Summary.Degraded > 0 {
			fmt.Fprintf(&buf, " (%d degraded)", r.Summary.Degraded)
		}
		switch n := r.Summary.UnreachableClusters; {
		case n == 1:
			buf.WriteString(", 1 workload cluster unreachable")
		case n > 1:
			fmt.Fprintf(&buf, ", %d workload clusters unreachable", n)
		}
		buf.WriteString(".\n")
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write status table: %w", err)
	}
	return nil
}

func renderCluster(buf *bytes.Buffer, c ClusterView, wide bool) {
	fmt.Fprintf(buf, "CLUSTER %s/%s\n", c.Namespace, c.Name)
	if c.Paused {
		buf.WriteString("  paused: no new node update starts\n")
	}
	if ip := c.InPlaceUpdate; ip != nil && ip.Status != "True" && !fleetReason(ip.Reason) {
		fmt.Fprintf(buf, "  InPlaceUpdate=%s: %s\n", ip.Status, joinNonEmpty(ip.Reason, ip.Message))
	}
	renderFleet(buf, c.Fleet)
	renderPools(buf, c.Pools, wide)
	if !c.WorkloadReachable {
		fmt.Fprintf(buf, "  workload cluster unreachable, showing management-side data only: %s\n", c.WorkloadError)
	}
	if len(c.Machines) == 0 {
		buf.WriteString("  no machines\n")
		return
	}
	var tbl bytes.Buffer
	tw := tabwriter.NewWriter(&tbl, 0, 0, 2, ' ', 0)
	header := "MACHINE\tROLE\tVERSION\tKUBELET\tPHASE\tPROGRESS\tDRAIN\tELAPSED\tUPDATING\tUP-TO-DATE\t"
	if wide {
		header += "NODE\tMACHINE-PHASE\tPLAN\tREPORTED\t"
	}
	fmt.Fprintln(tw, header+"DETAILS")
	for _, m := range c.Machines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t",
			m.Name, m.Role, dash(m.Version), dash(m.KubeletVersion),
			phaseCell(m, c.WorkloadReachable), progressCell(m), drainCell(m.Drain), elapsedCell(m),
			condCell(m.Conditions.Updating), condCell(m.Conditions.UpToDate))
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", dash(m.Node), dash(m.MachinePhase), dash(m.DesiredPlan), reportedCell(m))
		}
		fmt.Fprintln(tw, details(m))
	}
	_ = tw.Flush() // writes to a bytes.Buffer, which cannot fail
	// tabwriter pads every cell but the last; drop the padding an empty last cell leaves.
	for line := range strings.Lines(tbl.String()) {
		buf.WriteString(strings.TrimRight(line, " \n"))
		buf.WriteByte('\n')
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func phaseCell(m MachineView, reachable bool) string {
	switch {
	case m.WaitingForControlPlane != "" && (m.Phase == "" || m.Phase == protocol.PhaseStaging):
		return string(machinestate.WaitingForControlPlane)
	case m.StagedForWindow && (m.Phase == "" || m.Phase == protocol.PhaseStaging):
		return string(machinestate.Staged)
	case m.Phase != "":
		return string(m.Phase)
	case !reachable && m.Node != "":
		return "?"
	}
	return "-"
}

func progressCell(m MachineView) string {
	if m.Steps <= 0 {
		return "-"
	}
	return Bar(m.Step, m.Steps, barWidth) + fmt.Sprintf(" %d/%d", m.Step, m.Steps)
}

// Bar draws step of steps as a text bar of width cells, e.g. "[####------]".
func Bar(step, steps, width int) string {
	filled := 0
	if steps > 0 {
		filled = min(max(step, 0), steps) * width / steps
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}

func drainCell(d Drain) string {
	switch d.State {
	case DrainSchedulable:
		return "-"
	case DrainCordoned:
		return "cordoned"
	case DrainCordonedExternally:
		return "cordoned (not by capi-inplace)"
	case DrainBlocked:
		return "blocked"
	}
	return "?"
}

// reportedCell is when the agent last reported on the plan (RFC 3339, UTC).
func reportedCell(m MachineView) string {
	if m.UpdatedAt == nil {
		return "-"
	}
	return m.UpdatedAt.UTC().Format(time.RFC3339)
}

func elapsedCell(m MachineView) string {
	if m.StartedAt == nil {
		return "-"
	}
	return FormatSeconds(m.ElapsedSeconds)
}

// FormatSeconds prints a duration compactly: 45s, 2m05s, 1h02m.
func FormatSeconds(s int64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
}

func condCell(c *Condition) string {
	if c == nil {
		return "-"
	}
	return c.Status
}

// details is the most useful sentence about a machine: why it failed, why its drain
// is blocked, or what the agent is doing; then any problem with the data.
func details(m MachineView) string {
	var parts []string
	switch {
	case m.Degraded:
		parts = append(parts, "DEGRADED, kept cordoned, needs manual repair: "+m.Failure)
	case m.Failure != "":
		parts = append(parts, m.Failure)
	case m.Drain.State == DrainBlocked && m.Drain.Message != "":
		parts = append(parts, "drain blocked: "+m.Drain.Message)
	case m.WaitingForControlPlane != "":
		parts = append(parts, m.WaitingForControlPlane)
	case m.StagedForWindow:
		parts = append(parts, joinNonEmpty("staged, waiting for a maintenance window", m.Message))
	case m.InProgress() || m.Phase == "":
		if s := joinNonEmpty(m.Action, m.Message); s != "" {
			parts = append(parts, s)
		}
	}
	parts = append(parts, m.Problems...)
	return strings.Join(parts, "; ")
}

// renderFleet writes the cluster's fleet controls (guard, budget, state, windows,
// cancel and retry requests) when any differs from the defaults.
func renderFleet(buf *bytes.Buffer, f FleetView) {
	quietState := f.State == "" || f.State == FleetActive || f.State == FleetPaused // paused has its own line
	if f.Guard == "on" && len(f.Failures) == 0 && quietState && f.Windows == "" && f.DownloadWindows == "" && len(f.Staged) == 0 &&
		f.RecordError == "" && len(f.Cancelled) == 0 && len(f.RetryRequested) == 0 {
		return // the defaults: nothing to say
	}
	budget := "no failures recorded"
	if n := len(f.Failures); n > 0 {
		budget = fmt.Sprintf("%d failed node(s) recorded (%s)", n, strings.Join(f.Failures, "; "))
	}
	fmt.Fprintf(buf, "  guard: %s; failure budget: %s\n", f.Guard, budget)
	if !quietState {
		fmt.Fprintf(buf, "  fleet: %s: %s\n", f.State, f.Message)
	}
	if f.Windows != "" {
		state := ""
		switch {
		case f.WindowError != "":
			state = "invalid: " + f.WindowError
		case f.WindowOpen != nil && *f.WindowOpen:
			state = "open"
		case f.NextOpening != nil:
			state = "closed, next opening " + f.NextOpening.Format(time.RFC3339)
		default:
			state = "closed, no opening within a week is long enough"
		}
		fmt.Fprintf(buf, "  maintenance windows %q: %s\n", f.Windows, state)
	}
	if f.DownloadWindows != "" {
		state := "closed"
		switch {
		case f.DownloadWindowError != "":
			state = "invalid: " + f.DownloadWindowError
		case f.DownloadWindowOpen != nil && *f.DownloadWindowOpen:
			state = "open"
		case f.DownloadNextOpening != nil:
			state = "closed, next opening " + f.DownloadNextOpening.Format(time.RFC3339)
		}
		fmt.Fprintf(buf, "  download windows %q: %s\n", f.DownloadWindows, state)
	}
	if len(f.Staged) > 0 {
		what := "staged, waiting for a maintenance window"
		if !f.StagedAndWaiting {
			what = "staged (the rest of the update is under way or needs a human)"
		}
		fmt.Fprintf(buf, "  %s: %s\n", what, strings.Join(f.Staged, ", "))
	}
	if f.RecordError != "" {
		fmt.Fprintf(buf, "  fleet record unreadable: %s\n", f.RecordError)
	}
	if len(f.Cancelled) > 0 {
		fmt.Fprintf(buf, "  cancelled: %s\n", strings.Join(f.Cancelled, ", "))
	}
	if len(f.RetryRequested) > 0 {
		fmt.Fprintf(buf, "  retry requested: %s\n", strings.Join(f.RetryRequested, ", "))
	}
}
