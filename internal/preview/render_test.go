package preview_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
)

// update rewrites the golden files: go test ./internal/preview -run Golden -update.
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
	maxUnavailable0 := previewtest.Default()
	maxUnavailable0.MDMaxUnavailable = 0
	tests := []struct {
		name   string
		report func(t *testing.T) preview.Report
		json   bool
	}{
		{name: "table-minor-upgrade", report: func(t *testing.T) preview.Report {
			return plan(t, previewtest.Default(), "", topologyVersion("v1.36.0"))
		}},
		{name: "json-minor-upgrade", json: true, report: func(t *testing.T) preview.Report {
			return plan(t, previewtest.Default(), "", topologyVersion("v1.36.0"))
		}},
		{name: "table-two-minors", report: func(t *testing.T) preview.Report {
			return plan(t, previewtest.Default(), "", topologyVersion("v1.37.0"))
		}},
		{name: "table-os-image-and-surge", report: func(t *testing.T) preview.Report { return plan(t, maxUnavailable0, mapped, imageChange) }},
		{name: "table-os-image", report: func(t *testing.T) preview.Report { return plan(t, previewtest.Default(), mapped, imageChange) }},
		{name: "table-control-plane-image-and-version", report: func(t *testing.T) preview.Report {
			o := previewtest.Default()
			o.Topology, o.CPReplicas, o.Workers, o.CPImage = false, 1, 0, "registry.example/node-os:1.0"
			o.ClusterAnnotations = map[string]string{inplacev1.SingleNodeControlPlaneAnnotation: "true"}
			return plan(t, o, mapped, cpImageAndVersion)
		}},
		{name: "table-unchanged", report: func(t *testing.T) preview.Report { return plan(t, previewtest.Default(), "", "") }},
		{name: "table-no-machines", report: func(*testing.T) preview.Report {
			return preview.Report{APIVersion: preview.ReportAPIVersion, Kind: preview.ReportKind, Namespace: "fleet", Cluster: "empty", Machines: []preview.MachinePlan{}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var b bytes.Buffer
			if tt.json {
				g.Expect(preview.RenderJSON(&b, tt.report(t))).To(Succeed())
			} else {
				g.Expect(preview.RenderTable(&b, tt.report(t))).To(Succeed())
			}
			golden(t, tt.name, b.Bytes())
		})
	}
}

// TestJSONRoundTrip guards the JSON schema: what we print decodes back to the same Report.
func TestJSONRoundTrip(t *testing.T) {
	g := NewWithT(t)
	r := plan(t, previewtest.Default(), mapped, imageChange)
	var b bytes.Buffer
	g.Expect(preview.RenderJSON(&b, r)).To(Succeed())
	var back preview.Report
	g.Expect(json.Unmarshal(b.Bytes(), &back)).To(Succeed())
	g.Expect(back).To(Equal(r))
	g.Expect(back.APIVersion).To(Equal("plan.inplace.capi-inplace.dev/v1alpha1"))
}
