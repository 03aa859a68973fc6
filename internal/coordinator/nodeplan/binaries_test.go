package nodeplan

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestBuildCarriesBinaries(t *testing.T) {
	g := NewWithT(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	bins := &protocol.KubernetesBinaries{
		Platform: "linux/amd64",
		Kubeadm:  protocol.BinaryArtifact{URL: "http://10.250.0.1:8080/v1.36.3/kubeadm", Digest: digest},
		Kubelet:  protocol.BinaryArtifact{URL: "http://10.250.0.1:8080/v1.36.3/kubelet", Digest: digest},
	}
	in := Input{Machine: machine("v1.36.3", false), NodeName: "node-1", Binaries: bins,
		Node: NodeFacts{KubeletVersion: "v1.35.4", ControlPlaneAtTarget: true}}
	p, err := Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Kubernetes.Binaries).To(Equal(bins))

	// The binaries are desired content: once the node reports the new version the
	// rebuilt plan keeps them, so it is pinned to the published plan's hash.
	in.Node.KubeletVersion = "v1.36.3"
	after, err := Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	pinned := Pin(after, p)
	h1, _ := pinned.Hash()
	h2, _ := p.Hash()
	g.Expect(h1).To(Equal(h2))

	// Without binaries the plan is what it was before (the OS image brings them).
	in.Binaries = nil
	p, err = Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Kubernetes.Binaries).To(BeNil())

	// Binaries that do not validate never reach a plan.
	in.Binaries = &protocol.KubernetesBinaries{Platform: "linux/amd64", Kubeadm: bins.Kubeadm, Kubelet: protocol.BinaryArtifact{URL: "ftp://x/kubelet", Digest: digest}}
	_, err = Build(in)
	g.Expect(err).To(MatchError(protocol.ErrInvalidPlan))
}
