package simhost

import (
	"context"
	"os"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestPreflightFailsLikeTheRealNode: a simulated node set up like the real-node
// lane (cgroup v1, no CoreDNS) refuses kubeadm upgrade apply and node until the
// plan carries the exceptions, and its instance-config.yaml is rewritten by the
// upgrade and put back by the rollback.
func TestPreflightFailsLikeTheRealNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := New(t.TempDir(), "n1", nil, logr.Discard())
	g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4", ControlPlane: true,
		PreflightFailures: []string{CheckSystemVerification, CheckCoreDNSUnsupportedPlugins, CheckCoreDNSMigration}})).To(Succeed())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h}
	before, err := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(err).NotTo(HaveOccurred(), "kubeadm 1.35+ writes instance-config.yaml at init")
	g.Expect(k.InstallBinaries(ctx, "v1.36.3")).To(Succeed())

	apply := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeApply}
	// The agent keeps the tail of kubeadm's stderr: the cgroup message's end, and
	// every check name after it.
	err = k.KubeadmUpgrade(ctx, apply)
	g.Expect(err).To(MatchError(ContainSubstring("FailCgroupV1")))
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSUnsupportedPlugins]")))
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSMigration]")))
	apply.IgnorePreflightErrors = []string{"SystemVerification"}
	err = k.KubeadmUpgrade(ctx, apply)
	g.Expect(err).To(MatchError(ContainSubstring("[ERROR CoreDNSUnsupportedPlugins]")), "every failing check must be listed")
	g.Expect(err.Error()).NotTo(ContainSubstring("FailCgroupV1"), "SystemVerification is ignored")
	img, _ := h.manifestImage("kube-apiserver")
	g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.4"), "a refused upgrade changes nothing")

	// upgrade node runs SystemVerification but not the CoreDNS checks.
	node := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode}
	for _, run := range []func() error{func() error { return k.KubeadmUpgrade(ctx, node) }, func() error { return k.ControlPlaneConfig(ctx, node) }} {
		err := run()
		g.Expect(err).To(MatchError(ContainSubstring("FailCgroupV1")))
		g.Expect(err.Error()).NotTo(ContainSubstring("CoreDNS"))
	}

	apply.IgnorePreflightErrors = []string{"CoreDNSMigration", "CoreDNSUnsupportedPlugins", "SystemVerification"}
	plan := &protocol.NodePlan{Kubernetes: apply}
	g.Expect(k.Backup(ctx, "h1", k.BackupSet(plan))).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, apply)).To(Succeed())
	after, _ := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(string(after)).To(ContainSubstring("written by kubeadm v1.36.3"))
	g.Expect(k.Restore(ctx, "h1")).To(Succeed())
	restored, _ := os.ReadFile(h.path(kube.KubeletInstanceConfig))
	g.Expect(string(restored)).To(Equal(string(before)))
}

// TestPreflightIsOptIn: without preflight-failures every check passes, so the
// demo and e2e policies need no exceptions.
func TestPreflightIsOptIn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := New(t.TempDir(), "n1", nil, logr.Discard())
	g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.35.4"})).To(Succeed())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h}
	g.Expect(k.InstallBinaries(ctx, "v1.36.3")).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode})).To(Succeed())
}
