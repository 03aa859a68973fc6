package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// TestAgentConfigCELGates: the agent installed in a cluster may list pods only
// when the policy gives a Machine of that cluster a CEL gate.
func TestAgentConfigCELGates(t *testing.T) {
	cel, err := policy.Parse([]byte(`
gates:
- cluster: ns/c1
  machineSelector: {matchLabels: {role: db}}
  gates:
  - name: pods-ready
    cel: {expression: "pods.size() > 0"}
`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	c1 := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c1"}}
	c2 := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c2"}}
	tests := []struct {
		name    string
		gates   GatesResolver
		cluster *clusterv1.Cluster
		want    bool
	}{
		{"CEL gate in the cluster", cel, c1, true},
		{"CEL gate in another cluster", cel, c2, false},
		{"command gates only", controlPlaneGates(t, "ns"), c1, false},
		{"no gates resolver", nil, c1, false},
		{"no cluster", cel, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Coordinator{opts: Options{AgentImage: "agent:v1", Gates: tt.gates}}
			NewWithT(t).Expect(c.agentConfig(tt.cluster).CELGates).To(Equal(tt.want))
		})
	}
}
