package preview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// RenderJSON writes the Report as one indented JSON document.
func RenderJSON(w io.Writer, r Report) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	// Reasons hold "->" and "<": keep them readable for people and jq alike.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode plan: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}

// RenderTable writes the Report as text: a header, one row per Machine, then why,
// with Machines that share the same explanation grouped, and a summary line.
func RenderTable(w io.Writer, r Report) error {
	return renderTable(w, r, false)
}

// RenderWideTable is RenderTable with more columns (-o wide): each Machine's Node and
// the path Cluster API would take (the hook it asks, or why it replaces).
func RenderWideTable(w io.Writer, r Report) error {
	return renderTable(w, r, true)
}

func renderTable(w io.Writer, r Report, wide bool) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "CLUSTER %s/%s\n", r.Namespace, r.Cluster)
	if r.Change != "" {
		fmt.Fprintf(&buf, "  change: %s\n", r.Change)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&buf, "  note: %s\n", n)
	}
	if len(r.Machines) == 0 {
		buf.WriteString("  no machines\n")
	} else {
		var tbl bytes.Buffer
		tw := tabwriter.NewWriter(&tbl, 0, 0, 2, ' ', 0)
		header := "MACHINE\tROLE\tOWNER\tVERSION\tVERDICT\tDRAIN\tREBOOT\tBACKEND"
		if wide {
			header += "\tNODE\tPATH"
		}
		fmt.Fprintln(tw, header)
		for _, m := range r.Machines {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", m.Name, m.Role, dash(m.Owner), versionCell(m),
				m.Verdict, drainCell(m), rebootCell(m), backendCell(m))
			if wide {
				fmt.Fprintf(tw, "\t%s\t%s", dash(m.Node), dash(m.Path))
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush() // writes to a bytes.Buffer, which cannot fail
		for line := range strings.Lines(tbl.String()) {
			buf.WriteString(strings.TrimRight(line, " \n"))
			buf.WriteByte('\n')
		}
		renderWhy(&buf, r.Machines)
	}
	fmt.Fprintf(&buf, "\n%d machines: %d in place, %d replaced, %d unchanged.\n", r.Summary.Machines, r.Summary.InPlace, r.Summary.Replace, r.Summary.Unchanged)
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write plan table: %w", err)
	}
	return nil
}

// renderWhy explains every Machine that changes. Machines with the same explanation
// (the Machines of one MachineSet, usually) share one block, in table order.
func renderWhy(buf *bytes.Buffer, machines []MachinePlan) {
	var order []string
	names := map[string][]string{}
	for _, m := range machines {
		block := why(m)
		if block == "" {
			continue
		}
		if _, seen := names[block]; !seen {
			order = append(order, block)
		}
		names[block] = append(names[block], m.Name)
	}
	if len(order) == 0 {
		return
	}
	buf.WriteString("\nWHY\n")
	for _, block := range order {
		fmt.Fprintf(buf, "%s: %s", strings.Join(names[block], ", "), block)
	}
}

// why is a Machine's explanation: its verdict, then one line per reason.
func why(m MachinePlan) string {
	var b strings.Builder
	switch m.Verdict {
	case VerdictInPlace:
		fmt.Fprintf(&b, "in place (%s)\n", m.Path)
		for _, d := range m.Changes {
			fmt.Fprintf(&b, "  + %s %s: %s\n", d.Object, d.Field, d.Reason)
		}
		switch m.ImageOrder {
		case protocol.ImageOrderKubernetesFirst:
			b.WriteString("  = kubeadm upgrades the static pods before the node boots the new image (kubeadm and kubelet from the policy's kubernetesBinaries)\n")
		case protocol.ImageOrderImageFirstKubeletAhead:
			fmt.Fprintf(&b, "  ! the node boots the new image before kubeadm upgrades its static pods (kubeadm %s comes only with the image): until then its kubelet runs one version ahead of the API server; list %s in the policy's kubernetesBinaries to upgrade first\n", m.DesiredVersion, m.DesiredVersion)
		case protocol.ImageOrderImageFirstWorker:
			b.WriteString("  = the node boots the new image, then kubeadm upgrades it (workers follow the control plane)\n")
		}
		if e := m.EtcdOnRollback; e != nil && e.Restore {
			fmt.Fprintf(&b, "  ! a rollback restores etcd from its snapshot taken when the update starts (%s): every write to the cluster after that is lost\n", e.Reason)
		} else if e != nil {
			fmt.Fprintf(&b, "  = a rollback keeps etcd's data (%s)\n", e.Reason)
		}
	case VerdictReplace:
		b.WriteString("replace\n")
		for _, r := range m.Reasons {
			fmt.Fprintf(&b, "  - %s\n", r)
		}
	default:
		return ""
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func versionCell(m MachinePlan) string {
	if m.DesiredVersion == "" || m.DesiredVersion == m.Version {
		return dash(m.Version)
	}
	return dash(m.Version) + "->" + m.DesiredVersion
}

func drainCell(m MachinePlan) string {
	switch {
	case m.Verdict == VerdictUnchanged:
		return "-"
	case m.Drain.By == DrainByClusterAPI:
		return "yes (by Cluster API)"
	case m.Drain.Needed:
		return "yes"
	case m.Drain.By == DrainByInPlace:
		return "no (single node)"
	}
	return "-"
}

func rebootCell(m MachinePlan) string {
	switch {
	case m.Verdict != VerdictInPlace:
		return "-"
	case m.Reboot.Needed:
		return "yes"
	}
	return "no"
}

func backendCell(m MachinePlan) string {
	if m.Verdict != VerdictInPlace {
		return "-"
	}
	if m.Backend.Runs || m.Backend.Name == "none" {
		return m.Backend.Name
	}
	return m.Backend.Name + " (no OS change)"
}
