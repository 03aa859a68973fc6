package status

import (
	"bytes"
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

type noNodes struct{}

func (noNodes) Nodes(context.Context, client.ObjectKey) ([]corev1.Node, error) { return nil, nil }

// TestGatherCountsFailuresAsTheCoordinator: Gather reads the MachineDeployment a
// recorded failure names, and the pool line counts the failure only while the
// MachineDeployment's spec is the one it failed with (fleet.Counted, as the
// coordinator's gate): scaling keeps it counted, a new template or deleting the
// MachineDeployment resets the budget.
func TestGatherCountsFailuresAsTheCoordinator(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	pol, err := policy.Parse([]byte(poolPolicy))
	g.Expect(err).NotTo(HaveOccurred())

	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "md-0"},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "demo", Replicas: ptr[int32](2),
			Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{ClusterName: "demo", Version: "v1.35.0"}},
		},
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: "demo", clusterv1.MachineDeploymentNameLabel: "md-0"}
	w1 := machine("w1", func(m *clusterv1.Machine) { m.Labels = labels })
	w2 := machine("w2", func(m *clusterv1.Machine) { m.Labels = labels })
	c := cluster("demo")
	c.Annotations = map[string]string{}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(md, &w1, &w2).Build()
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{clusterv1.GroupVersion})
	mapper.Add(clusterv1.GroupVersion.WithKind("MachineDeployment"), meta.RESTScopeNamespace)

	// The failure is recorded with the spec key of md-0 as it is now, read as the coordinator reads it.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineDeployment"))
	g.Expect(cl.Get(ctx, client.ObjectKeyFromObject(md), u)).To(Succeed())
	spec, _ := u.Object["spec"].(map[string]any)
	key, err := fleet.OwnerSpecKey(fleet.KindMachineDeployment, spec)
	g.Expect(err).NotTo(HaveOccurred())
	record := fleet.State{Failures: []fleet.Failure{{Machine: "w1", Node: "w1", Pool: "workers", Owner: "MachineDeployment/md-0", Spec: key,
		Cause: "RolledBack: GateFailed", Plan: "p", At: now}}}
	c.Annotations[inplacev1.FleetStateAnnotation] = record.Encode()
	g.Expect(cl.Create(ctx, &c)).To(Succeed())

	poolLine := func() string {
		t.Helper()
		snap, err := Gatherer{Management: cl, Workload: noNodes{}, Mapper: mapper}.Gather(ctx, "default", "demo")
		g.Expect(err).NotTo(HaveOccurred())
		pools := BuildWithPools(snap, now, pol).Clusters[0].Pools
		g.Expect(pools).To(HaveLen(1))
		var buf bytes.Buffer
		renderPools(&buf, pools, false)
		return buf.String()
	}
	update := func(mutate func(*clusterv1.MachineDeployment)) {
		t.Helper()
		cur := &clusterv1.MachineDeployment{}
		g.Expect(cl.Get(ctx, client.ObjectKeyFromObject(md), cur)).To(Succeed())
		mutate(cur)
		g.Expect(cl.Update(ctx, cur)).To(Succeed())
	}

	g.Expect(poolLine()).To(ContainSubstring("pool workers: 2 machines; budget 1 of 1 spent, halted"), "the spec it failed with: counted")

	update(func(m *clusterv1.MachineDeployment) { m.Spec.Replicas = ptr[int32](5) })
	g.Expect(poolLine()).To(ContainSubstring("pool workers: 2 machines; budget 1 of 1 spent, halted"), "scaling is not a new spec")

	update(func(m *clusterv1.MachineDeployment) { m.Spec.Template.Spec.Version = "v1.36.0" })
	g.Expect(poolLine()).To(ContainSubstring("pool workers: 2 machines; budget 0 of 1 spent; "), "the spec changed since the failure: the budget reset")

	g.Expect(cl.Delete(ctx, md)).To(Succeed())
	g.Expect(poolLine()).To(ContainSubstring("pool workers: 2 machines; budget 0 of 1 spent; "), "the owner is gone")
}
