package protocol

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

var testDigest = "sha256:" + strings.Repeat("0f", 32)

func planWithBinaries() *NodePlan {
	p := validPlan()
	p.Kubernetes.Binaries = &KubernetesBinaries{
		Platform: "linux/amd64",
		Kubeadm:  BinaryArtifact{URL: "http://10.250.0.1:8080/v1.36.0/kubeadm", Digest: testDigest},
		Kubelet:  BinaryArtifact{URL: "https://mirror.example/v1.36.0/kubelet", Digest: testDigest},
	}
	return p
}

func TestValidateBinaries(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(b *KubernetesBinaries)
		wantErr string
	}{
		{name: "valid", mutate: func(*KubernetesBinaries) {}},
		{name: "arm64", mutate: func(b *KubernetesBinaries) { b.Platform = "linux/arm64" }},
		{name: "architecture without os", mutate: func(b *KubernetesBinaries) { b.Platform = "amd64" }, wantErr: `kubernetes.binaries: platform "amd64" is not one of`},
		{name: "unknown platform", mutate: func(b *KubernetesBinaries) { b.Platform = "windows/amd64" }, wantErr: "platform"},
		{name: "ftp url", mutate: func(b *KubernetesBinaries) { b.Kubeadm.URL = "ftp://host/kubeadm" }, wantErr: "kubeadm: url: \"ftp://host/kubeadm\" is not an http, https, oci or oci+http URL"},
		{name: "relative url", mutate: func(b *KubernetesBinaries) { b.Kubelet.URL = "/v1.36.0/kubelet" }, wantErr: "kubelet: url:"},
		{name: "url without host", mutate: func(b *KubernetesBinaries) { b.Kubelet.URL = "http:///kubelet" }, wantErr: "has no host"},
		{name: "url with a password", mutate: func(b *KubernetesBinaries) { b.Kubelet.URL = "https://u:secret@mirror/kubelet" }, wantErr: "carries user information"},
		{name: "empty url", mutate: func(b *KubernetesBinaries) { b.Kubelet.URL = "" }, wantErr: "kubelet: url:"},
		{name: "bare hex digest", mutate: func(b *KubernetesBinaries) { b.Kubeadm.Digest = strings.Repeat("0f", 32) }, wantErr: "kubeadm: digest"},
		{name: "uppercase digest", mutate: func(b *KubernetesBinaries) { b.Kubeadm.Digest = strings.ToUpper(testDigest) }, wantErr: "kubeadm: digest"},
		{name: "short digest", mutate: func(b *KubernetesBinaries) { b.Kubelet.Digest = "sha256:abc" }, wantErr: "kubelet: digest"},
		{name: "missing digest", mutate: func(b *KubernetesBinaries) { b.Kubelet.Digest = "" }, wantErr: "kubelet: digest"},
		{name: "declared size", mutate: func(b *KubernetesBinaries) { b.Kubelet.Size = 58 << 20 }},
		{name: "negative size", mutate: func(b *KubernetesBinaries) { b.Kubelet.Size = -1 }, wantErr: "kubelet: size -1 is not between 0"},
		{name: "size over the agent's bound", mutate: func(b *KubernetesBinaries) { b.Kubelet.Size = MaxArtifactBytes + 1 }, wantErr: "kubelet: size"},
		{name: "source host with a CA bundle and redirect hosts", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "Mirror.Example", CABundle: testCA, RedirectHosts: []string{"storage.example:9000"}}}
		}},
		{name: "source host of no source", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "other.example"}}
		}, wantErr: "kubelet: sourceHosts[0]: host other.example is the host of no url or mirror"},
		{name: "source host listed twice", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "mirror.example"}, {Host: "MIRROR.example"}}
		}, wantErr: "is listed twice"},
		{name: "source host with a scheme", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "https://mirror.example"}}
		}, wantErr: "is not a host[:port]"},
		{name: "CA bundle without a certificate", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "mirror.example", CABundle: "not PEM"}}
		}, wantErr: "caBundle holds no PEM certificate"},
		{name: "CA bundle too large", mutate: func(b *KubernetesBinaries) {
			b.Kubelet.SourceHosts = []SourceHost{{Host: "mirror.example", CABundle: strings.Repeat("x", MaxSourceCABundleBytes+1)}}
		}, wantErr: "caBundle is 16385 bytes"},
		{name: "redirect host with a path", mutate: func(b *KubernetesBinaries) {
			b.Kubeadm.SourceHosts = []SourceHost{{Host: "10.250.0.1:8080", RedirectHosts: []string{"storage/x"}}}
		}, wantErr: "redirectHosts[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p := planWithBinaries()
			tt.mutate(p.Kubernetes.Binaries)
			err := p.Validate()
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ErrInvalidPlan))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}

func TestBinariesRoundTrip(t *testing.T) {
	g := NewWithT(t)
	p := planWithBinaries()
	data, err := EncodePlan(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring(`"binaries":{"platform":"linux/amd64","kubeadm":{"url":"http://10.250.0.1:8080/v1.36.0/kubeadm","digest":"` + testDigest + `"}`))
	got, err := DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(p))

	// An unknown field inside binaries (say, inline content from a newer
	// coordinator) is refused, never half-applied: a plan for a newer agent.
	bad := strings.Replace(string(data), `"platform":`, `"content":"AAAA","platform":`, 1)
	_, err = DecodePlan([]byte(bad))
	g.Expect(err).To(MatchError(ErrPlanNewerThanAgent))
	g.Expect(err.Error()).To(ContainSubstring(`unknown field "content"`))

	// A plan without binaries encodes without the key: existing plans keep their hash.
	p.Kubernetes.Binaries = nil
	data, err = EncodePlan(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).NotTo(ContainSubstring("binaries"))
}

func TestDigestHex(t *testing.T) {
	g := NewWithT(t)
	h, err := DigestHex(testDigest)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h).To(Equal(strings.Repeat("0f", 32)))
	for _, bad := range []string{"", "sha256:", "sha512:" + strings.Repeat("0f", 32), testDigest + "0", " " + testDigest} {
		_, err := DigestHex(bad)
		g.Expect(errors.Is(err, ErrInvalidDigest)).To(BeTrue(), bad)
	}
}

// TestDigestOf: the digest the agent and the backends compute is the one a plan
// carries (valid, round-trips through DigestHex) and is the known SHA-256.
func TestDigestOf(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    string
	}{
		{"", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	} {
		g := NewWithT(t)
		got := DigestOf([]byte(tc.content))
		g.Expect(got).To(Equal(tc.want), tc.content)
		g.Expect(ValidDigest(got)).To(BeTrue())
		h, err := DigestHex(got)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(DigestFromHex(h)).To(Equal(got))
	}
}
