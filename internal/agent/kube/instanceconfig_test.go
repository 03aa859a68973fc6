package kube

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestRollbackRestoresKubeletInstanceConfig: kubeadm 1.35+ keeps the node's
// kubelet settings in instance-config.yaml and kubeadm upgrade rewrites it; a
// rollback must put the pre-update file back.
func TestRollbackRestoresKubeletInstanceConfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	before := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"
	write(t, root, KubeletInstanceConfig, before, 0o644)

	for _, action := range []protocol.KubeadmAction{protocol.KubeadmUpgradeNode, protocol.KubeadmNone} {
		p := protocol.NewPlan("n1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: action}
		hash := "h-" + string(action)
		g.Expect(h.BackupSet(p)).To(ContainElement(KubeletInstanceConfig))
		g.Expect(h.Backup(ctx, hash, h.BackupSet(p))).To(Succeed())
		write(t, root, KubeletInstanceConfig, "# rewritten by kubeadm upgrade\n", 0o644)
		g.Expect(h.Restore(ctx, hash)).To(Succeed())
		g.Expect(read(t, root, KubeletInstanceConfig)).To(Equal(before), string(action))
	}
}
