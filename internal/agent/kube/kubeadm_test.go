package kube

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestKubeadmPreflightExceptions: the plan's preflight exceptions reach every
// kubeadm command the agent runs, as kubeadm's own flag.
func TestKubeadmPreflightExceptions(t *testing.T) {
	skip := []string{"SystemVerification", "CoreDNSUnsupportedPlugins", "CoreDNSMigration"}
	apply := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeApply, IgnorePreflightErrors: skip}
	node := protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode, IgnorePreflightErrors: []string{"SystemVerification"}}
	staged := func(k protocol.KubernetesPlan) protocol.KubernetesPlan {
		k.Binaries = &protocol.KubernetesBinaries{Platform: "linux/amd64"}
		return k
	}
	tests := []struct {
		name string
		do   func(h *Host) error
		want []string
	}{
		{"upgrade apply: its preflight phase, then the rest", func(h *Host) error { return h.KubeadmUpgrade(context.Background(), apply) }, []string{
			"kubeadm upgrade apply phase preflight v1.36.3 --yes --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration",
			"kubeadm upgrade apply v1.36.3 --yes --skip-phases=preflight --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration"}},
		{"upgrade apply, images staged: no pull", func(h *Host) error { return h.KubeadmUpgrade(context.Background(), staged(apply)) }, []string{
			"kubeadm upgrade apply phase preflight v1.36.3 --yes --config /var/lib/capi-inplace/upgrade.yaml --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration",
			"kubeadm upgrade apply v1.36.3 --yes --skip-phases=preflight --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration"}},
		{"upgrade apply, images staged, kubeadm 1.31: no phases", func(h *Host) error {
			k := staged(apply)
			k.Version = "v1.31.2"
			return h.KubeadmUpgrade(context.Background(), k)
		}, []string{"kubeadm upgrade apply v1.31.2 --yes --config /var/lib/capi-inplace/upgrade.yaml --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration"}},
		{"upgrade apply, images staged, kubeadm 1.30: no UpgradeConfiguration", func(h *Host) error {
			k := staged(apply)
			k.Version = "v1.30.5"
			return h.KubeadmUpgrade(context.Background(), k)
		}, []string{"kubeadm upgrade apply v1.30.5 --yes --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration"}},
		{"upgrade node, control plane, images staged: no pull", func(h *Host) error {
			k := staged(node)
			k.Role = protocol.RoleControlPlane
			return h.KubeadmUpgrade(context.Background(), k)
		}, []string{"kubeadm upgrade node --config /var/lib/capi-inplace/upgrade.yaml --ignore-preflight-errors=SystemVerification"}},
		{"upgrade node, worker: pulls nothing anyway", func(h *Host) error { return h.KubeadmUpgrade(context.Background(), staged(node)) },
			[]string{"kubeadm upgrade node --ignore-preflight-errors=SystemVerification"}},
		{"upgrade node", func(h *Host) error { return h.KubeadmUpgrade(context.Background(), node) },
			[]string{"kubeadm upgrade node --ignore-preflight-errors=SystemVerification"}},
		{"control-plane re-render, no manifest to compare images with", func(h *Host) error {
			return h.ControlPlaneConfig(context.Background(), &protocol.NodePlan{Kubernetes: apply})
		},
			[]string{"kubeadm upgrade node --certificate-renewal=false --ignore-preflight-errors=SystemVerification,CoreDNSUnsupportedPlugins,CoreDNSMigration"}},
		{"control-plane re-render without exceptions", func(h *Host) error {
			return h.ControlPlaneConfig(context.Background(), &protocol.NodePlan{Kubernetes: protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmNone}})
		}, []string{"kubeadm upgrade node --certificate-renewal=false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := (&backendtest.Runner{}).On("kubeadm", "", nil)
			g.Expect(tt.do(&Host{Root: t.TempDir(), Runner: r})).To(Succeed())
			g.Expect(r.Calls()).To(Equal(tt.want))
		})
	}
}
