package protocol

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestRegistryInClear: only an oci+http source reaches its registry without
// TLS; the plan lists such sources of a registry across its binaries, their
// mirrors and the OS download, whatever the host's case.
func TestRegistryInClear(t *testing.T) {
	g := NewWithT(t)
	for src, want := range map[string]string{
		"oci+http://Mirror.Site.local:5000/k8s/kubelet": "mirror.site.local:5000",
		"oci://registry.example.com/k8s/kubelet":        "",
		"http://mirror.site.local:5000/kubelet":         "",
		"https://mirror.site.local:5000/kubelet":        "",
		"oci+http:///k8s/kubelet":                       "",
		"::not a URL":                                   "",
	} {
		host, ok := RegistryInClear(src)
		g.Expect(host).To(Equal(want), src)
		g.Expect(ok).To(Equal(want != ""), src)
	}

	p := planWithBinaries()
	p.Kubernetes.Binaries.Kubeadm = BinaryArtifact{URL: "oci://mirror.site.local:5000/k8s/kubeadm", Digest: testDigest}
	p.Kubernetes.Binaries.Kubelet.Mirrors = []string{"oci+http://MIRROR.site.local:5000/k8s/kubelet", "oci+http://other.site.local/k8s/kubelet"}
	p.OS = &OSImage{Download: &BinaryArtifact{URL: "oci+http://mirror.site.local:5000/os/image", Digest: testDigest}}
	g.Expect(p.SourcesInClear("mirror.site.local:5000")).To(Equal([]string{
		"oci+http://MIRROR.site.local:5000/k8s/kubelet", "oci+http://mirror.site.local:5000/os/image"}))
	g.Expect(p.SourcesInClear("registry.example.com")).To(BeEmpty())
}
