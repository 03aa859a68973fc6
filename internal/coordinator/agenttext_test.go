package coordinator

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestAgentTextIsBounded: a node that reports a failure with a 200 KiB message
// and a forged log line (or a 200 KiB reason) gets a bounded, single-line hook
// answer, Machine condition, Event and Cluster fleet record.
func TestAgentTextIsBounded(t *testing.T) {
	huge := strings.Repeat("x", 200<<10)
	tests := []struct {
		name   string
		reason string
		msg    string
	}{
		{"200 KiB message with a forged line", "GateFailed", "gate failed\nE1204 12:00:00 forged line " + huge},
		{"200 KiB reason", huge, "gate failed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			node := []string{"wt1", "wt2"}[i]
			f.node(node, "v1.36.0", false)
			f.node(node+"-peer", "v1.36.0", false)
			m := f.machine("m-"+node, node, "v1.36.0", false)
			req := f.request(m, nil)
			c := f.coordinator()
			callUntil(t, c, req, "pick up plan", 5)
			hash := f.getNode(node).Annotations[inplacev1.DesiredPlanAnnotation]
			f.agentReports(node, protocol.NodeStatus{PlanHash: hash, Phase: protocol.PhaseRolledBack, Step: 1, Steps: 1, Reason: tt.reason, Message: tt.msg}, false)

			resp := call(c, req)
			g.Expect(len(resp.Message)).To(BeNumerically("<", 2*protocol.MaxMessageBytes), "hook answer")
			g.Expect(resp.Message).NotTo(ContainSubstring("\n"))
			stored := &clusterv1.Machine{}
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKeyFromObject(m), stored)).To(Succeed())
			if cond := meta.FindStatusCondition(stored.Status.Conditions, inplacev1.InPlaceUpdateCondition); cond != nil {
				g.Expect(len(cond.Message)).To(BeNumerically("<", 2*protocol.MaxMessageBytes), "Machine condition")
			}
			for _, e := range f.rec.events {
				g.Expect(len(e)).To(BeNumerically("<", 3*protocol.MaxMessageBytes), "Event")
				g.Expect(e).NotTo(ContainSubstring("\n"))
			}
			cluster := &clusterv1.Cluster{}
			g.Expect(f.mgmt.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "c1"}, cluster)).To(Succeed())
			g.Expect(len(cluster.Annotations[inplacev1.FleetStateAnnotation])).To(BeNumerically("<", 2*protocol.MaxMessageBytes), "fleet record")
		})
	}
}
