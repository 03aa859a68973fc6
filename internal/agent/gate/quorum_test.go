package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestEtcdQuorumGate: a control-plane plan is marked good only when the whole
// etcd cluster is (after the local member's own health), and BeforeTouch holds a
// control-plane plan, never a worker's, on the same check.
func TestEtcdQuorumGate(t *testing.T) {
	cp := protocol.NewPlan("cp-1")
	cp.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	worker := protocol.NewPlan("cp-1")
	worker.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	// A control plane of an external etcd (kubeadm clusterConfiguration.etcd.external)
	// has no local member: its etcd checks would fail for good.
	external := protocol.NewPlan("cp-1")
	external.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode, ExternalEtcd: true}
	noMember := errors.New("no etcd member is configured for this node")
	down := errors.New("etcd member m2 is not healthy: no answer")
	tests := []struct {
		name           string
		plan           *protocol.NodePlan
		health, quorum error
		wantGate       string // "" passes Run
		wantBefore     error  // nil passes BeforeTouch
	}{
		{name: "control plane, cluster whole", plan: cp},
		{name: "control plane, a member down", plan: cp, quorum: down, wantGate: EtcdQuorum, wantBefore: down},
		{name: "local member down is its own gate first", plan: cp, health: errors.New("local unhealthy"), quorum: down, wantGate: EtcdHealth, wantBefore: down},
		{name: "external etcd: no local member, neither gate nor hold asks etcd", plan: external, health: noMember, quorum: noMember},
		{name: "worker never asks etcd", plan: worker, health: errors.New("no etcd"), quorum: errors.New("no etcd")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)},
				Etcd: etcd{err: tt.health, quorum: tt.quorum}, Timeout: 20 * time.Millisecond, Interval: 5 * time.Millisecond}
			err := c.Run(context.Background(), tt.plan)
			if tt.wantGate == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				var ge *Error
				g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
				g.Expect(ge.Gate).To(Equal(tt.wantGate))
			}
			before := c.BeforeTouch(context.Background(), tt.plan)
			if tt.wantBefore == nil {
				g.Expect(before).NotTo(HaveOccurred())
			} else {
				g.Expect(before).To(MatchError(tt.wantBefore))
			}
		})
	}
}
