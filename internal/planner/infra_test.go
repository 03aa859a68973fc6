package planner_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// TestProviderImageFields exercises built-in provider entries whose image is more
// than one string: Metal3 (URL plus checksum) and Azure (an object).
func TestProviderImageFields(t *testing.T) {
	pol, err := policy.New(policy.Config{
		Backends: policy.BackendConfig{Default: "ostree"},
		Artifacts: []policy.ArtifactConfig{
			{Image: "https://img.example.com/node-1.36.qcow2", Ref: "example/node/1.36", Digest: digest},
			{Image: map[string]any{"sharedGallery": map[string]any{"name": "node", "version": "1.36.0"}}, Ref: "example/azure/1.36", Digest: digest},
		},
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	metal3 := func(url, checksum string) map[string]any {
		return map[string]any{"image": map[string]any{"url": url, "checksum": checksum, "checksumType": "sha256", "format": "qcow2"}, "automatedCleaningMode": "metadata"}
	}
	azure := func(version string) map[string]any {
		return map[string]any{"vmSize": "Standard_D4s_v5", "image": map[string]any{"sharedGallery": map[string]any{"name": "node", "version": version}}}
	}
	tests := []struct {
		name     string
		kind     string
		cur, des map[string]any
		want     map[string]bool
	}{
		{name: "metal3 image and checksum change together", kind: "Metal3MachineTemplate",
			cur: metal3("https://img.example.com/node-1.35.qcow2", "aaa"), des: metal3("https://img.example.com/node-1.36.qcow2", "bbb"),
			want: map[string]bool{"spec.template.spec.image.url": true, "spec.template.spec.image.checksum": true}},
		{name: "metal3 checksum alone cannot change", kind: "Metal3MachineTemplate",
			cur: metal3("https://img.example.com/node-1.36.qcow2", "aaa"), des: metal3("https://img.example.com/node-1.36.qcow2", "bbb"),
			want: map[string]bool{"spec.template.spec.image.checksum": false}},
		{name: "metal3 other fields are refused", kind: "Metal3MachineTemplate",
			cur: metal3("u", "c"), des: func() map[string]any { m := metal3("u", "c"); m["automatedCleaningMode"] = "disabled"; return m }(),
			want: map[string]bool{"spec.template.spec.automatedCleaningMode": false}},
		{name: "azure image object", kind: "AzureMachineTemplate", cur: azure("1.35.0"), des: azure("1.36.0"),
			want: map[string]bool{"spec.template.spec.image.sharedGallery.version": true}},
		{name: "azure image object not mapped", kind: "AzureMachineTemplate", cur: azure("1.35.0"), des: azure("1.37.0"),
			want: map[string]bool{"spec.template.spec.image.sharedGallery.version": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			cur, des := baseMS("a", "v1.35.2"), baseMS("b", "v1.35.2")
			cur.infra = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": tt.kind,
				"spec": map[string]any{"template": map[string]any{"spec": tt.cur}}}}
			des.infra = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": tt.kind,
				"spec": map[string]any{"template": map[string]any{"spec": tt.des}}}}
			p, err := planner.New(pol)
			g.Expect(err).NotTo(HaveOccurred())
			curObjs, desObjs := cur.objects(), des.objects()
			res, err := p.CanUpdateMachineSet(nil, curObjs, desObjs)
			g.Expect(err).NotTo(HaveOccurred())
			got := map[string]bool{}
			for _, d := range res.Decisions {
				got[d.Field] = d.Covered
			}
			g.Expect(got).To(Equal(tt.want), "%+v", res.Decisions)
			verifyPatches(g, res, curObjs, desObjs, tmplBase, tmplBase)
		})
	}
}
