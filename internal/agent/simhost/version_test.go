package simhost

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestKubeadmRefusesWhatThePlanRefuses: the simulated kubeadm parses versions with
// protocol.ParseVersion, the parser plan validation and the agent's admission use,
// so a version the real path refuses ("v1.36", "1.36.0": a tolerant parser reads
// both as 1.36.0) is refused here too, with ParseVersion's reason, and no manifest
// changes.
func TestKubeadmRefusesWhatThePlanRefuses(t *testing.T) {
	for _, v := range []string{"v1.36", "1.36.0", "v1.36.0.0", ""} {
		t.Run(v, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			_, perr := protocol.ParseVersion(v)
			g.Expect(perr).To(HaveOccurred(), "the real path refuses %q", v)
			g.Expect(protocol.ValidVersion(v)).To(BeFalse())

			h, _ := newHost(t, true)
			k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
			g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.0"})).To(Succeed())
			plan := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: v, Action: protocol.KubeadmUpgradeApply}
			err := k.KubeadmUpgrade(ctx, plan)
			g.Expect(err).To(MatchError(ContainSubstring(perr.Error())))
			img, _ := h.manifestImage("kube-apiserver")
			g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.2"))
		})
	}
}
