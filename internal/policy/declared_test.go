package policy

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestDeclaredOSImageAndDownloads(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	p, err := Parse([]byte(`
backends: {default: swupdate}
artifacts:
- image: edge-os-2026.12
  kind: KubeadmConfig
  url: oci://registry.example.com/edge/os
  mirrors: [oci+http://mirror.site-a.local:5000/edge/os]
  digest: "` + d + `"
- image: edge-os-2026.11
  ref: /srv/edge-os-2026.11.swu
  digest: "` + d + `"
`))
	if err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)
	img, reason := p.DeclaredOSImage(DeclaredImage("edge-os-2026.12\n"), "edge", "site-a")
	g.Expect(reason).To(BeEmpty())
	g.Expect(img).To(Equal(&protocol.OSImage{Backend: "swupdate", Ref: protocol.ArtifactPath(d), Digest: d,
		Download: &protocol.BinaryArtifact{URL: "oci://registry.example.com/edge/os", Digest: d, Mirrors: []string{"oci+http://mirror.site-a.local:5000/edge/os"}}}))
	plan := protocol.NewPlan("n1")
	plan.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmNone}
	plan.OS = img
	g.Expect(plan.Validate()).To(Succeed(), "the resolved image is a valid plan part")

	img, _ = p.DeclaredOSImage("edge-os-2026.11", "edge", "site-a")
	g.Expect(img.Ref).To(Equal("/srv/edge-os-2026.11.swu"))
	g.Expect(img.Download).To(BeNil())
	img, reason = p.DeclaredOSImage("edge-os-2027.01", "edge", "site-a")
	g.Expect(img).To(BeNil())
	g.Expect(reason).To(ContainSubstring("is not mapped"))
	// An entry of an infrastructure kind is not a declared image's.
	img, _ = p.OSImageFor("DevMachine", "edge-os-2026.12", "edge", "site-a")
	g.Expect(img).To(BeNil())

	for _, bad := range []struct{ yaml, wantErr string }{
		{`artifacts: [{image: a, ref: /x, url: "https://h/x", digest: "` + d + `"}]`, "ref and url exclude each other"},
		{`artifacts: [{image: a, digest: "` + d + `"}]`, "ref or url is required"},
		{`artifacts: [{image: a, url: "ftp://h/x", digest: "` + d + `"}]`, "is not an http, https, oci or oci+http URL"},
		{`artifacts: [{image: a, url: "oci://h/Repo:tag", digest: "` + d + `"}]`, "is not oci://<registry>/<repository>"},
		{`artifacts: [{image: a, url: "https://h/x"}]`, "digest"},
		{`artifacts: [{image: a, ref: /x, mirrors: ["https://m/x"], digest: "` + d + `"}]`, "mirrors need a url"},
	} {
		_, err := Parse([]byte(bad.yaml))
		g.Expect(err).To(MatchError(ErrInvalid), bad.yaml)
		g.Expect(err.Error()).To(ContainSubstring(bad.wantErr), bad.yaml)
	}
}
