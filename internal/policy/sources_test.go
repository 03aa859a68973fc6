package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func selfSignedCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "site-a"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+prefix)
}

// TestArtifactSizeAndSources: an artifact's size and the settings of its
// sources' hosts (artifactSources) reach the plan's artifact, for OS bundles and
// Kubernetes binaries alike; only the hosts an artifact's sources name are
// carried, in the order of its sources.
func TestArtifactSizeAndSources(t *testing.T) {
	g := NewWithT(t)
	ca := selfSignedCA(t)
	p, err := Parse([]byte(`
backends: {default: rauc}
artifactSources:
- host: Mirror.Site-A.local:8443
  caBundle: |
` + indent(ca, "    ") + `
- host: cache.site-a.local
  redirectHosts: [minio.site-a.local:9000]
- host: unused.example
artifacts:
- image: edge-os-2026.12
  url: https://mirror.site-a.local:8443/os/edge.raucb
  mirrors: [http://cache.site-a.local/os/edge.raucb]
  digest: "` + digestA + `"
  size: 1073741824
kubernetesBinaries:
  v1.36.3:
    linux/amd64:
      kubeadm: {url: "https://dl.k8s.io/v1.36.3/bin/linux/amd64/kubeadm", digest: "` + digestA + `", size: 74252472}
      kubelet: {url: "https://dl.k8s.io/v1.36.3/bin/linux/amd64/kubelet", digest: "` + digestB + `", mirrors: ["https://mirror.site-a.local:8443/k8s/kubelet"]}
`))
	g.Expect(err).NotTo(HaveOccurred())
	mirrorHost := protocol.SourceHost{Host: "Mirror.Site-A.local:8443", CABundle: ca}
	cacheHost := protocol.SourceHost{Host: "cache.site-a.local", RedirectHosts: []string{"minio.site-a.local:9000"}}

	img, reason := p.OSImageFor("DockerMachine", "edge-os-2026.12", "default", "c1")
	g.Expect(reason).To(BeEmpty())
	g.Expect(img.Download.Size).To(Equal(int64(1 << 30)))
	g.Expect(img.Download.SourceHosts).To(Equal([]protocol.SourceHost{cacheHost, mirrorHost}), "mirrors first, as they are tried")
	g.Expect(img.Download.Validate()).To(Succeed())

	b, err := p.KubernetesBinaries("v1.36.3", "linux/amd64")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(b.Kubeadm.Size).To(Equal(int64(74252472)))
	g.Expect(b.Kubeadm.SourceHosts).To(BeEmpty(), "dl.k8s.io has no entry")
	g.Expect(b.Kubelet.Size).To(BeZero())
	g.Expect(b.Kubelet.SourceHosts).To(Equal([]protocol.SourceHost{mirrorHost}))

	// The plan carries them through encoding.
	plan := protocol.NewPlan("node-1")
	plan.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode, Binaries: b}
	plan.OS = img
	data, err := protocol.EncodePlan(plan)
	g.Expect(err).NotTo(HaveOccurred())
	back, err := protocol.DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.OS.Download).To(Equal(img.Download))
	g.Expect(back.Kubernetes.Binaries).To(Equal(b))
}

func TestArtifactSizeAndSourcesValidation(t *testing.T) {
	for _, tt := range []struct {
		name, policy, wantErr string
	}{
		{"negative size", `
artifacts: [{image: a, url: "https://m/a", digest: "` + digestA + `", size: -1}]`, "artifacts[0]: size -1 is not between 0 (not declared) and 4294967296 bytes"},
		{"size over 4 GiB", `
kubernetesBinaries: {v1.36.3: {linux/amd64: {kubeadm: {url: "https://m/a", digest: "` + digestA + `", size: 4294967297}, kubelet: {url: "https://m/b", digest: "` + digestB + `"}}}}`,
			`kubernetesBinaries["v1.36.3"]["linux/amd64"]: kubeadm: size 4294967297`},
		{"size without url", `
artifacts: [{image: a, ref: "os:v2", digest: "` + digestA + `", size: 10}]`, "artifacts[0].size needs a url"},
		{"host with a scheme", `
artifactSources: [{host: "https://m"}]`, `artifactSources[0]: host "https://m" is not a host[:port]`},
		{"CA bundle without a certificate", `
artifactSources: [{host: m, caBundle: "not PEM"}]`, "artifactSources[0]: caBundle holds no PEM certificate"},
		{"host twice", `
artifactSources: [{host: m}, {host: M}]`, "artifactSources[1]: host M is listed twice"},
		{"redirect host with a path", `
artifactSources: [{host: m, redirectHosts: ["n/x"]}]`, "artifactSources[0]: redirectHosts[0]"},
		{"unknown field", `
artifactSources: [{host: m, insecureSkipVerify: true}]`, "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.policy))
			g.Expect(err).To(MatchError(ErrInvalid))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}
