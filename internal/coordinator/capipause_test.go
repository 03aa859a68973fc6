package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// TestCAPIPauseIsHonoured: while Cluster API pauses the Machine (its Cluster's
// spec.paused, as clusterctl move sets it, or the paused annotation on the
// Cluster or the Machine), UpdateMachine answers "call again" and touches nothing
// in the workload cluster: no cordon, no drain, no plan. Lifted, the update starts.
func TestCAPIPauseIsHonoured(t *testing.T) {
	tests := []struct {
		name  string
		pause func(*clusterv1.Cluster, *clusterv1.Machine)
	}{
		{"Cluster spec paused", func(c *clusterv1.Cluster, _ *clusterv1.Machine) { c.Spec.Paused = ptr.To(true) }},
		{"paused annotation on the Cluster", func(c *clusterv1.Cluster, _ *clusterv1.Machine) {
			c.Annotations = map[string]string{clusterv1.PausedAnnotation: ""}
		}},
		{"paused annotation on the Machine", func(_ *clusterv1.Cluster, m *clusterv1.Machine) { m.Annotations[clusterv1.PausedAnnotation] = "" }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			node := []string{"wp1", "wp2", "wp3"}[i]
			f.node(node, "v1.35.0", false)
			f.node(node+"-peer", "v1.35.0", false)
			m := f.machine("m-"+node, node, "v1.36.0", false)
			cluster := &clusterv1.Cluster{}
			key := client.ObjectKey{Namespace: f.ns, Name: "c1"}
			g.Expect(f.mgmt.Get(f.ctx, key, cluster)).To(Succeed())
			stored := &clusterv1.Machine{}
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
			tt.pause(cluster, stored)
			g.Expect(f.mgmt.Update(f.ctx, cluster)).To(Succeed())
			g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
			req := f.request(m, nil)
			c := f.coordinator()
			before := f.getNode(node).ResourceVersion

			for range 2 {
				resp := call(c, req)
				g.Expect(resp.RetryAfterSeconds).To(Equal(int32(retryPaused)), resp.Message)
				g.Expect(resp.Message).To(ContainSubstring("Cluster API pauses Machine"))
			}
			n := f.getNode(node)
			g.Expect(n.ResourceVersion).To(Equal(before), "nothing written to the node")
			g.Expect(n.Spec.Unschedulable).To(BeFalse())
			g.Expect(f.wl.Get(f.ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: inplacev1.PlanSecretName(node)}, &corev1.Secret{})).NotTo(Succeed(), "no plan")

			// Unpaused: the update starts.
			g.Expect(f.mgmt.Get(f.ctx, key, cluster)).To(Succeed())
			cluster.Spec.Paused = nil
			delete(cluster.Annotations, clusterv1.PausedAnnotation)
			g.Expect(f.mgmt.Update(f.ctx, cluster)).To(Succeed())
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
			delete(stored.Annotations, clusterv1.PausedAnnotation)
			g.Expect(f.mgmt.Update(f.ctx, stored)).To(Succeed())
			call(c, f.request(m, nil))
			g.Expect(f.getNode(node).Spec.Unschedulable).To(BeTrue(), "cordoned once unpaused")
		})
	}
}
