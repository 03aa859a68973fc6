package status

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
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
