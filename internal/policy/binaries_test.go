package policy

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

const binariesYAML = `
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "http://10.250.0.1:8080/v1.36.3/kubeadm", digest: "` + digestA + `"}
      kubelet: {url: "http://10.250.0.1:8080/v1.36.3/kubelet", digest: "` + digestB + `"}
    linux/arm64:
      kubeadm: {url: "https://dl.k8s.io/v1.36.3/bin/linux/arm64/kubeadm", digest: "` + digestB + `"}
      kubelet: {url: "https://dl.k8s.io/v1.36.3/bin/linux/arm64/kubelet", digest: "` + digestA + `"}
`

func TestKubernetesBinaries(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(binariesYAML))
	g.Expect(err).NotTo(HaveOccurred())

	got, err := p.KubernetesBinaries("v1.36.3", "linux/amd64")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(&protocol.KubernetesBinaries{
		Platform: "linux/amd64",
		Kubeadm:  protocol.BinaryArtifact{URL: "http://10.250.0.1:8080/v1.36.3/kubeadm", Digest: digestA},
		Kubelet:  protocol.BinaryArtifact{URL: "http://10.250.0.1:8080/v1.36.3/kubelet", Digest: digestB},
	}))
	got, err = p.KubernetesBinaries("v1.36.3", "linux/arm64")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Kubeadm.URL).To(Equal("https://dl.k8s.io/v1.36.3/bin/linux/arm64/kubeadm"))

	// A version the policy does not list keeps today's behaviour: no binaries in
	// the plan, the OS image must bring them.
	got, err = p.KubernetesBinaries("v1.35.4", "linux/amd64")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeNil())
	got, err = Builtin().KubernetesBinaries("v1.36.3", "linux/amd64")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeNil())

	// A listed version without the node's platform is refused, not guessed.
	_, err = p.KubernetesBinaries("v1.36.3", "linux/s390x")
	g.Expect(err).To(MatchError(ErrNoBinariesForPlatform))
	g.Expect(err.Error()).To(ContainSubstring(`has linux/amd64, linux/arm64, node platform is "linux/s390x"`))
}

func TestKubernetesBinariesValidation(t *testing.T) {
	entry := func(kubeadmURL, kubeadmDigest string) string {
		return `
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "` + kubeadmURL + `", digest: "` + kubeadmDigest + `"}
      kubelet: {url: "http://mirror/kubelet", digest: "` + digestB + `"}
`
	}
	tests := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{name: "valid", yaml: entry("http://mirror/kubeadm", digestA)},
		{name: "https", yaml: entry("https://mirror/kubeadm", digestA)},
		{name: "file url", yaml: entry("file:///opt/kubeadm", digestA), wantErr: `kubernetesBinaries["v1.36.3"]["linux/amd64"]: kubeadm: url: "file:///opt/kubeadm" is not an http, https, oci or oci+http URL`},
		{name: "no scheme", yaml: entry("mirror/kubeadm", digestA), wantErr: "is not an http, https, oci or oci+http URL"},
		{name: "credentials in the url", yaml: entry("https://admin:hunter2@mirror/kubeadm", digestA), wantErr: "carries user information"},
		{name: "bare hex digest", yaml: entry("http://mirror/kubeadm", strings.TrimPrefix(digestA, "sha256:")), wantErr: "kubeadm: digest"},
		{name: "uppercase hex digest", yaml: entry("http://mirror/kubeadm", "sha256:"+strings.Repeat("A", 64)), wantErr: "kubeadm: digest"},
		{name: "63 hex digits", yaml: entry("http://mirror/kubeadm", digestA[:len(digestA)-1]), wantErr: "kubeadm: digest"},
		{name: "missing kubelet", yaml: `
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "http://mirror/kubeadm", digest: "` + digestA + `"}
`, wantErr: "kubelet: url:"},
		{name: "architecture without os", yaml: `
kubernetesBinaries:
  v1.36.3:
    amd64:
      kubeadm: {url: "http://mirror/kubeadm", digest: "` + digestA + `"}
      kubelet: {url: "http://mirror/kubelet", digest: "` + digestB + `"}
`, wantErr: `platform "amd64" is not one of linux/amd64, linux/arm64`},
		{name: "version without v", yaml: `
kubernetesBinaries:
  1.36.3:
    linux/amd64:
      kubeadm: {url: "http://mirror/kubeadm", digest: "` + digestA + `"}
      kubelet: {url: "http://mirror/kubelet", digest: "` + digestB + `"}
`, wantErr: `kubernetesBinaries["1.36.3"]: not a Kubernetes version`},
		{name: "version without platforms", yaml: "kubernetesBinaries:\n  v1.36.3: {}\n", wantErr: "lists no platform"},
		{name: "unknown field", yaml: `
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "http://mirror/kubeadm", digest: "` + digestA + `", sha512: "x"}
      kubelet: {url: "http://mirror/kubelet", digest: "` + digestB + `"}
`, wantErr: `unknown field "sha512"`},
		{name: "sha256 instead of digest", yaml: `
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "http://mirror/kubeadm", sha256: "` + digestA + `"}
      kubelet: {url: "http://mirror/kubelet", digest: "` + digestB + `"}
`, wantErr: `unknown field "sha256"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.yaml))
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ErrInvalid))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}
