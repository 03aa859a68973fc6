package coordinator

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// controlPlaneGates is a policy with one gate for every control-plane Machine of
// the cluster namespace/c1.
func controlPlaneGates(t *testing.T, namespace string) *policy.Policy {
	t.Helper()
	pol, err := policy.Parse(fmt.Appendf(nil, `
gates:
- cluster: %s/c1
  machineSelector:
    matchExpressions:
    - {key: cluster.x-k8s.io/control-plane, operator: Exists}
  gates:
  - name: lane-health
    command: ["/bin/sh", "-c", "test -f /etc/realnode/healthy"]
    passWithinSeconds: 20
`, namespace))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

var laneGate = protocol.Gate{Name: "lane-health", Command: []string{"/bin/sh", "-c", "test -f /etc/realnode/healthy"}, PassWithinSeconds: 20}

func TestUserGates(t *testing.T) {
	pol := controlPlaneGates(t, "ns")
	clash, err := policy.Parse([]byte(`
gates:
- gates: [{name: health, command: [/bin/true]}]
- cluster: ns/c1
  gates: [{name: health, command: [/bin/false]}]
`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	m := func(namespace, cluster string, controlPlane bool) *clusterv1.Machine {
		labels := map[string]string{clusterv1.ClusterNameLabel: cluster}
		if controlPlane {
			labels[clusterv1.MachineControlPlaneLabel] = ""
		}
		return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "m1", Labels: labels}}
	}
	tests := []struct {
		name      string
		resolver  GatesResolver
		machine   *clusterv1.Machine
		want      []protocol.Gate
		wantInput string
	}{
		{name: "control plane of the cluster", resolver: pol, machine: m("ns", "c1", true), want: []protocol.Gate{laneGate}},
		{name: "worker of the cluster", resolver: pol, machine: m("ns", "c1", false)},
		{name: "control plane of another cluster", resolver: pol, machine: m("ns", "c2", true)},
		{name: "no resolver", machine: m("ns", "c1", true)},
		{name: "pools that clash", resolver: clash, machine: m("ns", "c1", false), wantInput: `health gates of machine ns/m1: gates of the pools that select the machine: [1].name "health" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := userGates(tt.resolver, tt.machine)
			if tt.wantInput != "" {
				g.Expect(errors.Is(err, nodeplan.ErrInput)).To(BeTrue(), "%v", err)
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantInput)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// TestPublishedPlansCarryThePoolsGates: through UpdateMachine, the plan published
// for a control-plane Machine of the cluster carries the policy's gate, and the
// plan of a worker of the same cluster carries none.
func TestPublishedPlansCarryThePoolsGates(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	c := f.coordinator(func(o *Options) { o.Gates = controlPlaneGates(t, f.ns) })
	cfg := &bootstrapv1.KubeadmConfig{Spec: bootstrapv1.KubeadmConfigSpec{Files: []bootstrapv1.File{{Path: "/etc/motd", Content: "gated"}}}}

	f.node("gate-cp", "v1.35.0", true)
	f.node("gate-w", "v1.35.0", false)
	cp := f.request(f.machine("m-gate-cp", "gate-cp", "v1.35.0", true), cfg)
	worker := f.request(f.machine("m-gate-w", "gate-w", "v1.35.0", false), cfg)
	callUntil(t, c, cp, "pick up plan", 5)
	callUntil(t, c, worker, "pick up plan", 5)

	plan, err := openPlan(f.planSecret("gate-cp").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Gates).To(Equal([]protocol.Gate{laneGate}))

	plan, err = openPlan(f.planSecret("gate-w").Data[inplacev1.PlanSecretDataKey])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Gates).To(BeEmpty())
	g.Expect(plan.Files).NotTo(BeEmpty(), "the worker's plan is the real thing, just without gates")
}
