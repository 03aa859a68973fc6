package nodeplan

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestBuildCarriesPreflightExceptions: the policy's exceptions for the Machine's
// pool reach the Kubernetes part of its plan; invalid ones make no plan.
func TestBuildCarriesPreflightExceptions(t *testing.T) {
	g := NewWithT(t)
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "cp-0", Labels: map[string]string{clusterv1.MachineControlPlaneLabel: ""}},
		Spec: clusterv1.MachineSpec{ClusterName: "store-42", Version: "v1.36.3"}}
	in := Input{Machine: m, NodeName: "cp-0", Node: NodeFacts{KubeletVersion: "v1.35.4"},
		IgnorePreflightErrors: []string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "SystemVerification"}}
	p, err := Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Kubernetes.Action).To(Equal(protocol.KubeadmUpgradeApply))
	g.Expect(p.Kubernetes.IgnorePreflightErrors).To(Equal([]string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "SystemVerification"}))

	in.IgnorePreflightErrors = []string{"Swap,NumCPU"}
	_, err = Build(in)
	g.Expect(err).To(MatchError(protocol.ErrInvalidPlan))
}
