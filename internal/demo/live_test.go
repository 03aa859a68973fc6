package demo

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/internal/status"
)

func report(phase protocol.Phase, step int, elapsed int64) status.Report {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return status.Report{Clusters: []status.ClusterView{{
		Namespace: "demo", Name: "demo", WorkloadReachable: true,
		Machines: []status.MachineView{
			{Name: "demo-cp", UID: "u1", Role: "control-plane", Version: "v1.36.0", KubeletVersion: "v1.35.0",
				Phase: phase, Step: step, Steps: 4, StartedAt: &start, ElapsedSeconds: elapsed, Drain: status.Drain{State: status.DrainSchedulable}},
			{Name: "demo-md", UID: "u2", Role: "worker", Version: "v1.35.0", KubeletVersion: "v1.35.0",
				Drain: status.Drain{State: status.DrainSchedulable}},
		},
	}}}
}

func table(t *testing.T, r status.Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := status.RenderTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestLiveLogLinesOnlyForChangedRows(t *testing.T) {
	g := NewWithT(t)
	l := &Live{}
	r1 := report(protocol.PhaseApplying, 1, 3)
	first := l.Frame(r1, table(t, r1), 3*time.Second)
	lines := strings.Split(strings.TrimSuffix(first, "\n"), "\n")
	g.Expect(lines).To(HaveLen(3), first)
	g.Expect(lines[0]).To(ContainSubstring("MACHINE"))
	g.Expect(lines[1]).To(HavePrefix("+3s     demo-cp "))
	g.Expect(lines[1]).To(ContainSubstring("Applying"))
	g.Expect(lines[1]).To(ContainSubstring("1/4"))
	g.Expect(lines[2]).To(HavePrefix("+3s     demo-md "))

	// Only the clock moved: nothing to print.
	r2 := report(protocol.PhaseApplying, 1, 9)
	g.Expect(l.Frame(r2, table(t, r2), 9*time.Second)).To(BeEmpty())

	// The control plane's step moved: its row only, no header again.
	r3 := report(protocol.PhaseApplying, 2, 12)
	third := l.Frame(r3, table(t, r3), 12*time.Second)
	g.Expect(strings.Count(third, "\n")).To(Equal(1), third)
	g.Expect(third).To(HavePrefix("+12s    demo-cp "))
	g.Expect(third).To(ContainSubstring("2/4"))
}

func TestLiveRedrawsInPlaceOnATerminal(t *testing.T) {
	g := NewWithT(t)
	l := &Live{TTY: true}
	r := report(protocol.PhaseApplying, 1, 3)
	tbl := table(t, r)
	first := l.Frame(r, tbl, 3*time.Second)
	g.Expect(first).NotTo(ContainSubstring("\x1b["), "nothing to erase on the first frame")
	g.Expect(first).To(HavePrefix("rollout +3s"))
	g.Expect(first).To(HaveSuffix(tbl))
	n := strings.Count(first, "\n")

	l.Width = 30
	second := l.Frame(r, tbl, 4*time.Second)
	for line := range strings.Lines(second[strings.Index(second, "rollout"):]) {
		g.Expect(len([]rune(strings.TrimSuffix(line, "\n")))).To(BeNumerically("<=", 29), "a wrapped line breaks the next redraw")
	}
	g.Expect(second).To(HavePrefix(fmt.Sprintf("\x1b[%dF\x1b[J", n)))
	g.Expect(second).To(ContainSubstring("rollout +4s"))
}

func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	upToDate := &status.Condition{Status: "True"}
	outdated := &status.Condition{Status: "False"}
	updating := &status.Condition{Status: "True"}
	look := func(ms ...status.MachineView) status.Report {
		return status.Report{Clusters: []status.ClusterView{{Machines: ms}}}
	}
	idle := func(name, version, kubelet string, upd, utd *status.Condition) status.MachineView {
		return status.MachineView{Name: name, Version: version, KubeletVersion: kubelet,
			Conditions: status.MachineConds{Updating: upd, UpToDate: utd}}
	}
	cases := []struct {
		name  string
		looks []status.Report
		want  map[string]time.Duration
	}{
		{
			name: "queued worker counts from Updating, not from going outdated",
			looks: []status.Report{
				look(idle("w", "v1.35.0", "v1.35.0", nil, outdated)),
				look(idle("w", "v1.35.0", "v1.35.0", updating, outdated)),
				look(idle("w", "v1.36.0", "v1.36.0", updating, outdated)),
				look(idle("w", "v1.36.0", "v1.36.0", nil, upToDate)),
			},
			want: map[string]time.Duration{"w": 2 * time.Second},
		},
		{
			name: "the agent working counts as started (single-node control plane: no Updating)",
			looks: []status.Report{
				look(status.MachineView{Name: "cp", Version: "v1.35.0", KubeletVersion: "v1.35.0", Phase: protocol.PhaseApplying, Steps: 4}),
				look(idle("cp", "v1.35.0", "v1.36.0", nil, upToDate)),
				look(idle("cp", "v1.36.0", "v1.36.0", nil, upToDate)),
			},
			want: map[string]time.Duration{"cp": 2 * time.Second},
		},
		{
			name:  "started and done between two looks",
			looks: []status.Report{look(idle("w", "v1.36.0", "v1.36.0", nil, upToDate))},
			want:  map[string]time.Duration{"w": 0},
		},
		{
			name:  "never done: no duration",
			looks: []status.Report{look(idle("w", "v1.36.0", "v1.35.0", updating, outdated))},
			want:  map[string]time.Duration{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tl := &Timeline{From: t0, ToVersion: "v1.36.0"}
			for i, r := range tc.looks {
				tl.Observe(r, t0.Add(time.Duration(i+1)*time.Second))
			}
			g.Expect(tl.Durations()).To(Equal(tc.want))
		})
	}
}
