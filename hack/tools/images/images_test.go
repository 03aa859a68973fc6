package main

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const repoRoot = "../../.."

// TestAgentImageReproducibleAndPulledByDigest builds the node agent's image for
// linux/amd64 and linux/arm64 from two copies of this source tree at different paths
// (the files git lists: tracked and untracked-not-ignored, so neither a concurrent
// edit of the tree nor the checkout path can enter) and requires the same index
// digest; pushes it to a registry started here
// (go-containerregistry's pkg/registry) and pulls it back by digest; and checks
// what each platform's image holds: the binary for its architecture as the root
// entrypoint, the CA bundle, the SBOM naming the modules the binary links.
func TestAgentImageReproducibleAndPulledByDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the agent for two platforms")
	}
	ctx := context.Background()
	reg := httptest.NewServer(registry.New(registry.Logger(discardLogger())))
	defer reg.Close()
	u, err := url.Parse(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	spec := ImageSpec{Name: "capi-inplace-agent", Package: "./cmd/capi-inplace-agent", Helpers: []string{"./cmd/capi-inplace-etcd", "./cmd/capi-inplace-cel"}, User: RootUser}
	// The commit's time, as Build reads it from git in a checkout.
	created, err := sourceDate(ctx, repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	build := func(src, out, push string) Result {
		t.Helper()
		res, err := Build(ctx, Options{RepoRoot: src, Out: out, Version: "test", Platforms: []string{"linux/amd64", "linux/arm64"},
			Images: []ImageSpec{spec}, Push: push, Created: created})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	srcA, srcB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "checkout-b")
	copySource(t, repoRoot, srcA, srcB)
	first := build(srcA, t.TempDir(), "")
	second := build(srcB, t.TempDir(), u.Host+"/capi-inplace")
	if first.Digest != second.Digest {
		t.Fatalf("same commit, two digests: %s and %s", first.Digest, second.Digest)
	}
	t.Logf("capi-inplace-agent@%s (twice)", first.Digest)

	// Pull by digest from the registry.
	ref, err := name.NewDigest(u.Host + "/capi-inplace/capi-inplace-agent@" + first.Digest.String())
	if err != nil {
		t.Fatal(err)
	}
	if second.Pushed != ref.String() {
		t.Errorf("pushed %q, want %q", second.Pushed, ref.String())
	}
	idx, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if d, _ := idx.Digest(); d != first.Digest {
		t.Fatalf("pulled index digest %s, want %s", d, first.Digest)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s", mt)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(im.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2", len(im.Manifests))
	}
	for _, desc := range im.Manifests {
		arch := desc.Platform.Architecture
		img, err := remote.Image(ref.Context().Digest(desc.Digest.String()), remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("pull %s image: %v", arch, err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != arch || cfg.OS != "linux" || cfg.Config.User != RootUser || strings.Join(cfg.Config.Entrypoint, " ") != "/capi-inplace-agent" {
			t.Errorf("%s config: os %s arch %s user %q entrypoint %v", arch, cfg.OS, cfg.Architecture, cfg.Config.User, cfg.Config.Entrypoint)
		}
		files := imageFiles(t, img)
		bin := filepath.Join(t.TempDir(), "agent")
		if err := os.WriteFile(bin, files["capi-inplace-agent"], 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: binary is not ELF: %v", arch, err)
		}
		if f.Machine != machines[arch] {
			t.Errorf("%s image holds a %s binary", arch, f.Machine)
		}
		_ = f.Close()
		// The helpers the agent runs, beside it and for the same platform, each
		// with its SBOM naming the library it keeps out of the agent.
		for _, h := range []struct{ name, module string }{
			{"capi-inplace-etcd", "go.etcd.io/etcd/client/v3"},
			{"capi-inplace-cel", "github.com/google/cel-go"},
		} {
			helper := filepath.Join(t.TempDir(), h.name)
			if err := os.WriteFile(helper, files[h.name], 0o755); err != nil {
				t.Fatal(err)
			}
			if hf, err := elf.Open(helper); err != nil {
				t.Errorf("%s: no helper binary at /%s: %v", arch, h.name, err)
			} else {
				if hf.Machine != machines[arch] {
					t.Errorf("%s image holds a %s %s", arch, hf.Machine, h.name)
				}
				_ = hf.Close()
			}
			var helperSBOM spdxDocument
			if err := json.Unmarshal(files["usr/share/sbom/"+h.name+".spdx.json"], &helperSBOM); err != nil {
				t.Errorf("%s %s SBOM: %v", arch, h.name, err)
			} else if !strings.Contains(fmt.Sprint(helperSBOM.Packages), h.module) {
				t.Errorf("%s %s SBOM lists no %s", arch, h.name, h.module)
			}
		}
		requireCABundle(t, files["etc/ssl/certs/ca-certificates.crt"])
		var sbom spdxDocument
		if err := json.Unmarshal(files["usr/share/sbom/capi-inplace-agent.spdx.json"], &sbom); err != nil {
			t.Fatalf("%s SBOM: %v", arch, err)
		}
		var mods []string
		for _, p := range sbom.Packages {
			mods = append(mods, p.Name)
		}
		all := strings.Join(mods, " ")
		if sbom.SPDXVersion != "SPDX-2.3" || !strings.Contains(all, "github.com/capi-inplace/capi-inplace/cmd/capi-inplace-agent") || !strings.Contains(all, "k8s.io/client-go") {
			t.Errorf("%s SBOM %s lists %s", arch, sbom.SPDXVersion, all)
		}
		if strings.Contains(all, "sigs.k8s.io/controller-runtime") {
			t.Errorf("the agent's SBOM lists controller-runtime: the agent links the extension's side")
		}
		if strings.Contains(all, "go.etcd.io/etcd") {
			t.Errorf("the agent's SBOM lists etcd's libraries: they belong to the etcd helper")
		}
		if strings.Contains(all, "github.com/google/cel-go") {
			t.Errorf("the agent's SBOM lists cel-go: it belongs to the CEL helper")
		}
	}

	// The layout on disk holds the same index.
	p, err := layout.FromPath(filepath.Join(filepath.Dir(first.SBOM), "oci"))
	if err != nil {
		t.Fatal(err)
	}
	lidx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	lm, err := lidx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(lm.Manifests) != 1 || lm.Manifests[0].Digest != first.Digest || lm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "capi-inplace-agent" {
		t.Errorf("OCI layout index: %+v", lm.Manifests)
	}
}

// TestPlatformImage checks the image assembly on a stand-in binary: a non-root
// image runs as 65532, nothing of the build machine leaks into the digest (same
// inputs, same digest), and each input changes it.
func TestPlatformImage(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	base, err := baseLayer()
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1764547200, 0)
	digest := func(spec ImageSpec, arch string, sbom string, when time.Time) v1.Hash {
		t.Helper()
		img, err := platformImage(spec, "linux", arch, base, bin, []byte(sbom), when)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ext := ImageSpec{Name: "capi-inplace", User: NonRootUser}
	d := digest(ext, "amd64", "{}", created)
	if again := digest(ext, "amd64", "{}", created); again != d {
		t.Errorf("same inputs, two digests: %s, %s", d, again)
	}
	for what, other := range map[string]v1.Hash{
		"arch":    digest(ext, "arm64", "{}", created),
		"sbom":    digest(ext, "amd64", `{"x":1}`, created),
		"created": digest(ext, "amd64", "{}", created.Add(time.Second)),
		"user":    digest(ImageSpec{Name: "capi-inplace", User: RootUser}, "amd64", "{}", created),
	} {
		if other == d {
			t.Errorf("a different %s gives the same digest", what)
		}
	}
	img, err := platformImage(ext, "linux", "amd64", base, bin, []byte("{}"), created)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || !cfg.Created.Time.Equal(created) {
		t.Errorf("user %q created %s", cfg.Config.User, cfg.Created)
	}
	files := imageFiles(t, img)
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("passwd: %q", files["etc/passwd"])
	}
	requireCABundle(t, files["etc/ssl/certs/ca-certificates.crt"])
}

func TestSourceDate(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1764547200")
	got, err := sourceDate(context.Background(), ".")
	if err != nil || !got.Equal(time.Unix(1764547200, 0)) {
		t.Errorf("sourceDate = %s, %v", got, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := sourceDate(context.Background(), "."); err == nil {
		t.Error("a malformed SOURCE_DATE_EPOCH is accepted")
	}
}

// imageFiles reads the flattened file system of img.
func imageFiles(t *testing.T, img v1.Image) map[string][]byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[strings.TrimPrefix(h.Name, "/")] = b
		}
	}
}

func requireCABundle(t *testing.T, b []byte) {
	t.Helper()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatalf("CA bundle: %v", err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle holds %d certificates", n)
	}
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// copySource copies the files git lists in repo (tracked, and untracked but not
// ignored) into each of dsts.
func copySource(t *testing.T, repo string, dsts ...string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(repo, f)
		st, err := os.Lstat(src)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the tree, or not a regular file
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dsts {
			dst := filepath.Join(d, f)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}
}
