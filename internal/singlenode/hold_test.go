package singlenode

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

func testKCP(mutate ...func(*controlplanev1.KubeadmControlPlane)) *controlplanev1.KubeadmControlPlane {
	kcp := &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: "ns", Labels: map[string]string{clusterv1.ClusterNameLabel: "c1"}},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To[int32](1),
			Version:  "v1.35.0",
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{
				Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "DevMachineTemplate", Name: "cp-v1"},
				},
			},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "one"}},
			},
		},
	}
	for _, m := range mutate {
		m(kcp)
	}
	return kcp
}

func withVersion(v string) func(*controlplanev1.KubeadmControlPlane) {
	return func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Version = v }
}

func withAnnotation(key, value string) func(*controlplanev1.KubeadmControlPlane) {
	return func(k *controlplanev1.KubeadmControlPlane) {
		if k.Annotations == nil {
			k.Annotations = map[string]string{}
		}
		k.Annotations[key] = value
	}
}

func withReplicas(n *int32) func(*controlplanev1.KubeadmControlPlane) {
	return func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Replicas = n }
}

func TestTargetHash(t *testing.T) {
	base := TargetHash(testKCP())
	tests := []struct {
		name    string
		mutate  func(*controlplanev1.KubeadmControlPlane)
		changes bool
	}{
		{"version", withVersion("v1.36.0"), true},
		{"files", func(k *controlplanev1.KubeadmControlPlane) { k.Spec.KubeadmConfigSpec.Files[0].Content = "two" }, true},
		{"infrastructure template rotated", func(k *controlplanev1.KubeadmControlPlane) {
			k.Spec.MachineTemplate.Spec.InfrastructureRef.Name = "cp-v2"
		}, true},
		{"replicas", withReplicas(ptr.To[int32](2)), false},
		{"machine template labels (propagated in place by KCP)", func(k *controlplanev1.KubeadmControlPlane) {
			k.Spec.MachineTemplate.ObjectMeta.Labels = map[string]string{"a": "b"}
		}, false},
		{"drain timeout (propagated in place by KCP)", func(k *controlplanev1.KubeadmControlPlane) {
			k.Spec.MachineTemplate.Spec.Deletion.NodeDrainTimeoutSeconds = ptr.To[int32](30)
		}, false},
		{"annotations", withAnnotation("x", "y"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := TargetHash(testKCP(tt.mutate))
			g.Expect(got).NotTo(BeEmpty())
			if tt.changes {
				g.Expect(got).NotTo(Equal(base))
			} else {
				g.Expect(got).To(Equal(base))
			}
		})
	}
}

func TestDecideHold(t *testing.T) {
	newTarget := TargetHash(testKCP(withVersion("v1.36.0")))
	held := withAnnotation(inplacev1.HoldAnnotation, "old-target")
	optIn := withAnnotation(inplacev1.SingleNodeControlPlaneAnnotation, "true")
	tests := []struct {
		name string
		in   HoldInput
		want HoldDecision
	}{
		{
			name: "opted-in single replica version change is held",
			in:   HoldInput{Old: testKCP(), New: testKCP(withVersion("v1.36.0")), OptedIn: true},
			want: HoldDecision{Hold: true, Target: newTarget},
		},
		{
			name: "unset replicas defaults to one and is held",
			in:   HoldInput{Old: testKCP(withReplicas(nil)), New: testKCP(withReplicas(nil), withVersion("v1.36.0")), OptedIn: true},
			want: HoldDecision{Hold: true, Target: newTarget},
		},
		{
			name: "two replicas are held",
			in:   HoldInput{Old: testKCP(withReplicas(ptr.To[int32](2))), New: testKCP(withReplicas(ptr.To[int32](2)), withVersion("v1.36.0")), OptedIn: true},
			want: HoldDecision{Hold: true, Target: TargetHash(testKCP(withReplicas(ptr.To[int32](2)), withVersion("v1.36.0")))},
		},
		{
			name: "files change is held",
			in: HoldInput{Old: testKCP(), New: testKCP(func(k *controlplanev1.KubeadmControlPlane) {
				k.Spec.KubeadmConfigSpec.Files[0].Content = "two"
			}), OptedIn: true},
			want: HoldDecision{Hold: true, Target: TargetHash(testKCP(func(k *controlplanev1.KubeadmControlPlane) { k.Spec.KubeadmConfigSpec.Files[0].Content = "two" }))},
		},
		{
			name: "not opted in passes",
			in:   HoldInput{Old: testKCP(), New: testKCP(withVersion("v1.36.0"))},
			want: HoldDecision{},
		},
		{
			name: "three replicas pass to upstream",
			in:   HoldInput{Old: testKCP(withReplicas(ptr.To[int32](3))), New: testKCP(withReplicas(ptr.To[int32](3)), withVersion("v1.36.0")), OptedIn: true},
			want: HoldDecision{},
		},
		{
			name: "update that does not outdate Machines passes",
			in:   HoldInput{Old: testKCP(), New: testKCP(withAnnotation("x", "y")), OptedIn: true},
			want: HoldDecision{},
		},
		{
			name: "operator pause present before the hold is remembered",
			in:   HoldInput{Old: testKCP(withAnnotation(clusterv1.PausedAnnotation, "")), New: testKCP(withAnnotation(clusterv1.PausedAnnotation, ""), withVersion("v1.36.0")), OptedIn: true},
			want: HoldDecision{Hold: true, Target: newTarget, OperatorPaused: true},
		},
		{
			name: "active hold survives a write that drops the annotations (server-side apply)",
			in:   HoldInput{Old: testKCP(held, withAnnotation(clusterv1.PausedAnnotation, "")), New: testKCP()},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "active hold is kept even after the opt-in went away: only the controller releases",
			in:   HoldInput{Old: testKCP(held), New: testKCP(), OptedIn: false},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "active hold follows a new spec change",
			in:   HoldInput{Old: testKCP(held), New: testKCP(withVersion("v1.36.0"))},
			want: HoldDecision{Hold: true, Target: newTarget},
		},
		{
			name: "active hold keeps the operator-paused marker",
			in:   HoldInput{Old: testKCP(held, withAnnotation(inplacev1.HoldOperatorPausedAnnotation, "true")), New: testKCP()},
			want: HoldDecision{Hold: true, Target: "old-target", OperatorPaused: true},
		},
		{
			name: "the controller's release of the current hold",
			in:   HoldInput{Old: testKCP(held), New: testKCP(), Release: "old-target", ReleaseUserOK: true, OptedIn: true},
			want: HoldDecision{Released: true},
		},
		{
			name: "a release of another target is no release",
			in:   HoldInput{Old: testKCP(held), New: testKCP(), Release: "stale", ReleaseUserOK: true},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "a release from another user is no release",
			in:   HoldInput{Old: testKCP(held), New: testKCP(), Release: "old-target", ReleaseUserOK: false},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "a release that also changes the spec is no release",
			in:   HoldInput{Old: testKCP(held), New: testKCP(withVersion("v1.36.0")), Release: "old-target", ReleaseUserOK: true},
			want: HoldDecision{Hold: true, Target: newTarget},
		},
		{
			name: "removing a held KCP's last opt-in is refused",
			in:   HoldInput{Old: testKCP(held, optIn), New: testKCP(held)},
			want: HoldDecision{Refused: optOutRefusal(testKCP())},
		},
		{
			name: "removing a held KCP's opt-in while the Cluster still opts in passes",
			in:   HoldInput{Old: testKCP(held, optIn), New: testKCP(held), OptedIn: true},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "removing a held KCP's last opt-in with a new allow-replace passes",
			in:   HoldInput{Old: testKCP(held, optIn), New: testKCP(held, withAnnotation(inplacev1.AllowReplaceAnnotation, "INC-1"))},
			want: HoldDecision{Hold: true, Target: "old-target"},
		},
		{
			name: "an allow-replace stored before admits no opt-out",
			in: HoldInput{Old: testKCP(held, optIn, withAnnotation(inplacev1.AllowReplaceAnnotation, "INC-1")),
				New: testKCP(held, withAnnotation(inplacev1.AllowReplaceAnnotation, "INC-1"))},
			want: HoldDecision{Refused: optOutRefusal(testKCP())},
		},
		{
			name: "a release marker on an object that is not held changes nothing else",
			in:   HoldInput{Old: testKCP(), New: testKCP(), Release: "x", ReleaseUserOK: true, OptedIn: true},
			want: HoldDecision{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := DecideHold(tt.in)
			got.Reason = ""
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestHoldAnnotations(t *testing.T) {
	g := NewWithT(t)
	g.Expect(HoldDecision{}.HoldAnnotations()).To(BeEmpty())
	g.Expect(HoldDecision{Hold: true, Target: "t"}.HoldAnnotations()).To(Equal(map[string]string{
		clusterv1.PausedAnnotation: "", inplacev1.HoldAnnotation: "t",
	}))
	g.Expect(HoldDecision{Hold: true, Target: "t", OperatorPaused: true}.HoldAnnotations()).To(HaveKeyWithValue(inplacev1.HoldOperatorPausedAnnotation, "true"))
}

func TestNeedsCluster(t *testing.T) {
	tests := []struct {
		name     string
		old, new *controlplanev1.KubeadmControlPlane
		want     bool
	}{
		{"version change below three replicas", testKCP(), testKCP(withVersion("v1.36.0")), true},
		{"no relevant change", testKCP(), testKCP(withAnnotation("a", "b")), false},
		{"three replicas", testKCP(withReplicas(ptr.To[int32](3))), testKCP(withReplicas(ptr.To[int32](3)), withVersion("v1.36.0")), false},
		{"already held", testKCP(withAnnotation(inplacev1.HoldAnnotation, "x")), testKCP(withVersion("v1.36.0")), false},
		{"held, the KCP's opt-in removed", testKCP(withAnnotation(inplacev1.HoldAnnotation, "x"), withAnnotation(inplacev1.SingleNodeControlPlaneAnnotation, "true")),
			testKCP(withAnnotation(inplacev1.HoldAnnotation, "x")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(NeedsCluster(tt.old, tt.new)).To(Equal(tt.want))
		})
	}
}

func TestClusterNameOf(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ClusterNameOf(testKCP())).To(Equal("c1"))
	owned := testKCP(func(k *controlplanev1.KubeadmControlPlane) {
		k.Labels = nil
		k.OwnerReferences = []metav1.OwnerReference{{Kind: "Cluster", Name: "c2"}}
	})
	g.Expect(ClusterNameOf(owned)).To(Equal("c2"))
	g.Expect(ClusterNameOf(testKCP(func(k *controlplanev1.KubeadmControlPlane) { k.Labels = nil }))).To(BeEmpty())
}
