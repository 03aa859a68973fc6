package preview_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
)

// TestDesiredPatch covers the writes derived from a Cluster.spec.topology change for
// the KubeadmControlPlane's metadata. Cluster API's desired-state generator
// (exp/topology/desiredstate computeControlPlane) sets the KCP's metadata.labels and
// metadata.annotations to spec.topology.controlPlane.metadata merged with the
// ClusterClass's controlPlane.metadata, and the topology controller server-side
// applies them in the same write as spec.version: a single-node opt-in written there
// with a version change arrives on the KCP with it. Fields other writers own (the hold
// webhook's annotations) stay.
func TestDesiredPatch(t *testing.T) {
	const optIn = inplacev1.SingleNodeControlPlaneAnnotation
	o := previewtest.Default()
	o.CPReplicas = 1
	o.KCPAnnotations = map[string]string{"other.example/owner": "kept"}
	live := previewtest.MustSnapshot(t, o)

	// desired is the generator's KCP for a topology at version with controlPlane
	// metadata annotations ann (the live object's spec, the topology's metadata).
	desired := func(t *testing.T, version string, ann map[string]string) *unstructured.Unstructured {
		t.Helper()
		kcp := live.ControlPlane.DeepCopy()
		kcp.Spec.Version = version
		kcp.Annotations = ann
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(kcp)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
		return u
	}
	pol := policy.Builtin()
	pl, err := planner.New(pol)
	if err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T, patch *unstructured.Unstructured) (preview.Snapshot, preview.MachinePlan) {
		t.Helper()
		g := NewWithT(t)
		g.Expect(patch).NotTo(BeNil())
		proposed, _, err := preview.Apply(live, []*unstructured.Unstructured{patch})
		g.Expect(err).NotTo(HaveOccurred())
		r, err := preview.Build(preview.Input{Live: live, Proposed: proposed, Planner: pl, Policy: pol, Backends: capabilities, Now: now})
		g.Expect(err).NotTo(HaveOccurred())
		return proposed, machine(t, r, "demo-cp-0")
	}

	t.Run("the opt-in added with the version: on the KCP, in place on our path, other annotations kept", func(t *testing.T) {
		g := NewWithT(t)
		proposed, m := build(t, preview.DesiredPatch(desired(t, "v1.35.0", nil), desired(t, "v1.36.0", map[string]string{optIn: "true"})))
		g.Expect(proposed.ControlPlane.Annotations).To(Equal(map[string]string{optIn: "true", "other.example/owner": "kept"}))
		g.Expect(proposed.ControlPlane.Spec.Version).To(Equal("v1.36.0"))
		g.Expect(m.Verdict).To(Equal(preview.VerdictInPlace))
		g.Expect(m.Path).To(Equal(preview.PathSingleNode))
	})
	t.Run("the version alone, no opt-in anywhere: replaced for the replica count", func(t *testing.T) {
		g := NewWithT(t)
		_, m := build(t, preview.DesiredPatch(desired(t, "v1.35.0", nil), desired(t, "v1.36.0", nil)))
		g.Expect(m.Verdict).To(Equal(preview.VerdictReplace))
		g.Expect(m.Causes).To(ContainElement(HaveField("Kind", preview.CauseRollout)))
	})
	t.Run("the opt-in removed from the topology: removed from the KCP alone", func(t *testing.T) {
		g := NewWithT(t)
		patch := preview.DesiredPatch(desired(t, "v1.35.0", map[string]string{optIn: "true"}), desired(t, "v1.35.0", nil))
		g.Expect(patch.Object).To(Equal(map[string]any{
			"apiVersion": controlplanev1.GroupVersion.String(), "kind": "KubeadmControlPlane",
			"metadata": map[string]any{"name": "demo-cp", "namespace": "fleet", "annotations": map[string]any{optIn: nil}},
		}))
		proposed, _ := build(t, patch)
		g.Expect(proposed.ControlPlane.Annotations).To(Equal(map[string]string{"other.example/owner": "kept"}))
	})
	t.Run("nothing changes: no patch", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(preview.DesiredPatch(desired(t, "v1.35.0", map[string]string{optIn: "true"}), desired(t, "v1.35.0", map[string]string{optIn: "true"}))).To(BeNil())
	})
}
