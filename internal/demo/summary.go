package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/status"
)

// Check marks used in the summary.
const (
	markOK   = "✓"
	markFail = "✗"
)

// MachineID is a Machine as recorded before and after the rollout.
type MachineID struct {
	Name string
	UID  string
	Role string
	Node string
}

// Outcome is everything the demo observed, the input of the summary.
type Outcome struct {
	FromVersion, ToVersion string
	FilePath, FileContent  string
	Before, After          []MachineID
	// Created and Deleted are the Machines the watch saw appear or go during the rollout.
	Created, Deleted []string
	// Durations is each Machine's update time as the live view saw it (Timeline);
	// AgentDurations the part its node's agent spent on the plan (start to commit).
	Durations, AgentDurations map[string]time.Duration
	// Kubelets maps Node name to the kubelet version it reports.
	Kubelets map[string]string
	// HostFiles maps Node name to FilePath's content on its host, or to the
	// error reading it (HostErrs).
	HostFiles map[string]string
	HostErrs  map[string]string
	// RolloutErr is why the rollout did not finish (time-out, failed node), if so.
	RolloutErr     error
	Rollout, Total time.Duration
}

// Check is one line of the verdict.
type Check struct {
	OK   bool
	Text string
}

// Evaluate turns an Outcome into the summary's checks, in display order.
func Evaluate(o Outcome) []Check {
	var checks []Check
	after := map[string]MachineID{}
	for _, m := range o.After {
		after[m.Name] = m
	}
	if len(o.Before) == 0 {
		checks = append(checks, Check{Text: "no machines were recorded before the rollout"})
	}
	for _, b := range o.Before {
		a, ok := after[b.Name]
		switch {
		case !ok:
			checks = append(checks, Check{Text: fmt.Sprintf("machine %s (%s, uid %s) is gone", b.Name, b.Role, b.UID)})
		case a.UID != b.UID:
			checks = append(checks, Check{Text: fmt.Sprintf("machine %s (%s) uid %s -> %s: replaced", b.Name, b.Role, b.UID, a.UID)})
		default:
			checks = append(checks, Check{OK: true, Text: fmt.Sprintf("machine %s (%s) kept: uid %s -> %s", b.Name, b.Role, b.UID, a.UID)})
		}
	}
	if len(o.After) != len(o.Before) {
		checks = append(checks, Check{Text: fmt.Sprintf("%d machines before, %d after", len(o.Before), len(o.After))})
	}
	churn := Check{OK: len(o.Created) == 0 && len(o.Deleted) == 0,
		Text: fmt.Sprintf("no Machine created or deleted during the rollout (watched: %d created %v, %d deleted %v)",
			len(o.Created), o.Created, len(o.Deleted), o.Deleted)}
	checks = append(checks, churn)

	nodes := sortedKeys(o.Kubelets)
	var at []string
	allAt := len(nodes) == len(o.Before) && len(nodes) > 0
	for _, n := range nodes {
		at = append(at, n+"="+o.Kubelets[n])
		if o.Kubelets[n] != o.ToVersion {
			allAt = false
		}
	}
	checks = append(checks, Check{OK: allAt, Text: fmt.Sprintf("every node at kubelet %s: %s", o.ToVersion, strings.Join(at, ", "))})

	fileOK := len(o.HostFiles) == len(o.Before) && len(o.HostErrs) == 0 && len(o.HostFiles) > 0
	var bad []string
	for _, n := range sortedKeys(o.HostFiles) {
		if o.HostFiles[n] != o.FileContent {
			fileOK = false
			bad = append(bad, fmt.Sprintf("%s has %q", n, o.HostFiles[n]))
		}
	}
	for _, n := range sortedKeys(o.HostErrs) {
		bad = append(bad, fmt.Sprintf("%s: %s", n, o.HostErrs[n]))
	}
	text := fmt.Sprintf("%s = %q on every node (%d)", o.FilePath, o.FileContent, len(o.HostFiles))
	if len(bad) > 0 {
		text += ": " + strings.Join(bad, "; ")
	}
	checks = append(checks, Check{OK: fileOK, Text: text})

	if o.RolloutErr != nil {
		checks = append(checks, Check{Text: "rollout did not finish: " + o.RolloutErr.Error()})
	} else {
		checks = append(checks, Check{OK: true, Text: fmt.Sprintf("rollout %s -> %s with a file change finished in %s", o.FromVersion, o.ToVersion, o.Rollout.Round(time.Second))})
	}
	return checks
}

// Passed reports whether every check passed.
func Passed(checks []Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return len(checks) > 0
}

// RenderSummary writes the summary: the checks, per-node durations, the total time and
// a final RESULT line (PASS or FAIL) that scripts can grep.
func RenderSummary(w io.Writer, o Outcome, checks []Check) error {
	var b strings.Builder
	b.WriteString("\nSUMMARY\n")
	for _, c := range checks {
		mark := markOK
		if !c.OK {
			mark = markFail
		}
		fmt.Fprintf(&b, "  %s %s\n", mark, c.Text)
	}
	b.WriteString("  per-node durations (update seen starting -> up to date; agent: plan start -> commit):\n")
	for _, m := range o.Before {
		fmt.Fprintf(&b, "    %-40s %-14s %-6s agent %s\n", m.Name, m.Role, seconds(o.Durations, m.Name), seconds(o.AgentDurations, m.Name))
	}
	fmt.Fprintf(&b, "  total time %s (rollout %s)\n", o.Total.Round(time.Second), o.Rollout.Round(time.Second))
	if Passed(checks) {
		b.WriteString("RESULT: PASS\n")
	} else {
		b.WriteString("RESULT: FAIL\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func seconds(ds map[string]time.Duration, name string) string {
	d, ok := ds[name]
	if !ok {
		return "-"
	}
	return status.FormatSeconds(int64(d.Round(time.Second) / time.Second))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
