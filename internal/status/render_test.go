package status

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// update rewrites the golden files: go test ./internal/status -run Golden -update.
var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	NewWithT(t).Expect(string(got)).To(Equal(string(want)))
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name   string
		report Report
		render func(*bytes.Buffer, Report) error
	}{
		{
			name:   "table-rollout",
			report: Build(rolloutSnapshot(t), now),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
		},
		{
			name:   "json-rollout",
			report: Build(rolloutSnapshot(t), now),
			render: func(b *bytes.Buffer, r Report) error { return RenderJSON(b, r, true) },
		},
		{
			name:   "table-wide-rollout",
			report: Build(rolloutSnapshot(t), now),
			render: func(b *bytes.Buffer, r Report) error { return RenderWideTable(b, r) },
		},
		{
			name:   "yaml-rollout",
			report: Build(rolloutSnapshot(t), now),
			render: func(b *bytes.Buffer, r Report) error { return RenderYAML(b, r) },
		},
		{
			name:   "table-empty-namespace",
			report: Build(Snapshot{Namespace: "team-a"}, now),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
		},
		{
			name:   "table-all-namespaces-empty",
			report: Build(Snapshot{}, now),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
		},
		{
			name:   "table-cluster-without-machines",
			report: Build(Snapshot{Namespace: "default", Clusters: []ClusterSnapshot{{Cluster: cluster("new")}}}, now),
			render: func(b *bytes.Buffer, r Report) error { return RenderTable(b, r) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var b bytes.Buffer
			g.Expect(tt.render(&b, tt.report)).To(Succeed())
			golden(t, tt.name, b.Bytes())
		})
	}
}

// TestJSONRoundTrip guards the JSON schema: what we print decodes back to the same Report.
func TestJSONRoundTrip(t *testing.T) {
	g := NewWithT(t)
	r := Build(rolloutSnapshot(t), now)
	var b bytes.Buffer
	g.Expect(RenderJSON(&b, r, false)).To(Succeed())
	g.Expect(bytes.Count(b.Bytes(), []byte("\n"))).To(Equal(1), "compact form is one line (for --watch)")
	var back Report
	g.Expect(json.Unmarshal(b.Bytes(), &back)).To(Succeed())
	g.Expect(back).To(Equal(r))
}

// TestYAMLRoundTrip: -o yaml is the JSON document's schema, and decodes back to the
// same Report.
func TestYAMLRoundTrip(t *testing.T) {
	g := NewWithT(t)
	r := Build(rolloutSnapshot(t), now)
	var b bytes.Buffer
	g.Expect(RenderYAML(&b, r)).To(Succeed())
	g.Expect(b.String()).To(HavePrefix("apiVersion: " + ReportAPIVersion + "\n"))
	var back Report
	g.Expect(yaml.UnmarshalStrict(b.Bytes(), &back)).To(Succeed())
	g.Expect(back).To(Equal(r))
}

// TestWideTable: -o wide has every column of the table plus NODE, MACHINE-PHASE,
// PLAN and REPORTED, with DETAILS still last.
func TestWideTable(t *testing.T) {
	g := NewWithT(t)
	r := Build(rolloutSnapshot(t), now)
	var narrow, wide bytes.Buffer
	g.Expect(RenderTable(&narrow, r)).To(Succeed())
	g.Expect(RenderWideTable(&wide, r)).To(Succeed())
	header := func(out string) []string {
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, "MACHINE ") {
				return strings.Fields(line)
			}
		}
		return nil
	}
	n, w := header(narrow.String()), header(wide.String())
	g.Expect(n).NotTo(BeEmpty())
	g.Expect(w).To(Equal(append(slices.Clone(n[:len(n)-1]), "NODE", "MACHINE-PHASE", "PLAN", "REPORTED", "DETAILS")))
	// A machine whose agent reported: its node, CAPI phase, plan hash and report
	// time, read at the NODE column's offset (PROGRESS cells hold a space).
	var headerLine string
	for line := range strings.Lines(wide.String()) {
		if strings.HasPrefix(line, "MACHINE ") && headerLine == "" {
			headerLine = line // the first cluster's block (each block aligns its own columns)
		}
	}
	col := strings.Index(headerLine, " NODE ") + 1
	var row []string
	for _, c := range r.Clusters[:1] {
		for _, m := range c.Machines {
			if m.UpdatedAt == nil || row != nil {
				continue
			}
			for line := range strings.Lines(wide.String()) {
				if strings.HasPrefix(line, m.Name+" ") {
					row = strings.Fields(line[col:])
				}
			}
			g.Expect(len(row)).To(BeNumerically(">=", 4), "row of %s", m.Name)
			g.Expect(row[:4]).To(Equal([]string{m.Node, m.MachinePhase, m.DesiredPlan, m.UpdatedAt.Format(time.RFC3339)}))
		}
	}
	g.Expect(row).NotTo(BeNil(), "the rollout fixture has a machine whose agent reported")
}

func TestBar(t *testing.T) {
	tests := []struct {
		step, steps int
		want        string
	}{
		{0, 7, "[----------]"},
		{3, 7, "[####------]"},
		{7, 7, "[##########]"},
		{9, 7, "[##########]"},
		{-1, 7, "[----------]"},
		{0, 0, "[----------]"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			NewWithT(t).Expect(Bar(tt.step, tt.steps, 10)).To(Equal(tt.want))
		})
	}
}

func TestFormatSeconds(t *testing.T) {
	tests := []struct {
		s    int64
		want string
	}{
		{0, "0s"}, {59, "59s"}, {60, "1m00s"}, {125, "2m05s"}, {3599, "59m59s"}, {3600, "1h00m"}, {3723, "1h02m"}, {90000, "25h00m"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			NewWithT(t).Expect(FormatSeconds(tt.s)).To(Equal(tt.want))
		})
	}
}
