package guard

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
)

// BenchmarkDecide is the pure part of a KubeadmControlPlane update's decision (both
// plans, no reads): what the guard costs per request without the API reads.
func BenchmarkDecide(b *testing.B) {
	live := previewtest.MustSnapshot(b, previewtest.Default())
	old, written := kcpWrite(func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Version = "v1.35.2" })(b, live)
	pol := policy.Builtin()
	pl, err := planner.New(pol)
	if err != nil {
		b.Fatal(err)
	}
	prop, _, err := preview.Apply(live, []*unstructured.Unstructured{Change(old, written)})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Object: "x", Live: live, Proposed: prop, Planner: pl, Policy: pol, Now: now}
	b.ResetTimer()
	for b.Loop() {
		if _, err := Decide(in); err != nil {
			b.Fatal(err)
		}
	}
}
