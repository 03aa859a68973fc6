package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Users the images' processes run as.
const (
	// NonRootUser is distroless's nonroot user, numeric so that Kubernetes can
	// verify runAsNonRoot (config/manager runs the extension as 65532:65532).
	NonRootUser = "65532:65532"
	// RootUser is for the node agent, which replaces the host's kubelet, kubeadm
	// and OS image from a privileged DaemonSet.
	RootUser = "0:0"
)

// ImageSpec is one image: its name and the main package its entrypoint runs.
type ImageSpec struct {
	Name    string
	Package string
	User    string
	// Helpers are further main packages whose binaries the image carries beside
	// the entrypoint, each at /<last element of the package path> with its own
	// SBOM (the agent's etcd and CEL helpers, cmd/capi-inplace-etcd and
	// cmd/capi-inplace-cel).
	Helpers []string
}

// helperBinary is one helper's binary for one platform, with its SBOM.
type helperBinary struct {
	Name string // file name in the image root
	Path string // built binary
	SBOM []byte
}

// Options say what Build builds.
type Options struct {
	RepoRoot  string
	Out       string
	Version   string
	Platforms []string
	Images    []ImageSpec
	Push      string
	// Created is the images' creation time; zero means SOURCE_DATE_EPOCH, else the
	// commit time of RepoRoot's HEAD.
	Created time.Time
	// RemoteOptions are passed to the push (tests: none needed for a local registry).
	RemoteOptions []remote.Option
}

// Result is one built image index.
type Result struct {
	Name   string
	Digest v1.Hash
	Index  v1.ImageIndex
	// SBOM is the path of the SPDX document, also inside every platform's image
	// at SBOMDir/<name>.spdx.json.
	SBOM string
	// Pushed is the pushed reference by digest, when Options.Push is set.
	Pushed string
}

// SBOMDir is where each image carries its SBOM.
const SBOMDir = "/usr/share/sbom"

// Build builds every image for every platform, writes the OCI layout
// <Out>/oci (one index per image, annotated with its name), the SBOMs and
// <Out>/digests.txt, and pushes when asked.
func Build(ctx context.Context, o Options) ([]Result, error) {
	if len(o.Images) == 0 || len(o.Platforms) == 0 {
		return nil, errors.New("no image or no platform to build")
	}
	created := o.Created
	if created.IsZero() {
		var err error
		if created, err = sourceDate(ctx, o.RepoRoot); err != nil {
			return nil, err
		}
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, err
	}
	binDir := filepath.Join(out, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	base, err := baseLayer()
	if err != nil {
		return nil, err
	}
	var results []Result
	for _, spec := range o.Images {
		var adds []mutate.IndexAddendum
		var sbom []byte
		helperSBOMs := map[string][]byte{}
		for _, platform := range o.Platforms {
			osName, arch, ok := strings.Cut(platform, "/")
			if !ok {
				return nil, fmt.Errorf("platform %q: want os/arch", platform)
			}
			bin := filepath.Join(binDir, spec.Name+"-"+osName+"-"+arch)
			if err := goBuild(ctx, o.RepoRoot, spec.Package, osName, arch, o.Version, bin); err != nil {
				return nil, err
			}
			// One SBOM per image: the platforms' binaries hold the same modules
			// (the first platform's build settings name its GOARCH).
			if sbom == nil {
				if sbom, err = spdxFromBinary(spec.Name, bin, created); err != nil {
					return nil, err
				}
			}
			var helpers []helperBinary
			for _, pkg := range spec.Helpers {
				h := helperBinary{Name: path.Base(pkg)}
				h.Path = filepath.Join(binDir, spec.Name+"-"+h.Name+"-"+osName+"-"+arch)
				if err := goBuild(ctx, o.RepoRoot, pkg, osName, arch, o.Version, h.Path); err != nil {
					return nil, err
				}
				if helperSBOMs[h.Name] == nil {
					if helperSBOMs[h.Name], err = spdxFromBinary(h.Name, h.Path, created); err != nil {
						return nil, err
					}
				}
				h.SBOM = helperSBOMs[h.Name]
				helpers = append(helpers, h)
			}
			img, err := platformImage(spec, osName, arch, base, bin, sbom, created, helpers...)
			if err != nil {
				return nil, fmt.Errorf("image %s %s: %w", spec.Name, platform, err)
			}
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}}})
		}
		idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		sbomPath := filepath.Join(out, spec.Name+".spdx.json")
		if err := os.WriteFile(sbomPath, sbom, 0o644); err != nil {
			return nil, err
		}
		results = append(results, Result{Name: spec.Name, Digest: d, Index: idx, SBOM: sbomPath})
	}
	if err := writeLayout(filepath.Join(out, "oci"), results); err != nil {
		return nil, err
	}
	var digests strings.Builder
	for i, r := range results {
		fmt.Fprintf(&digests, "%s@%s\n", r.Name, r.Digest)
		if o.Push == "" {
			continue
		}
		tag, err := name.NewTag(o.Push + "/" + r.Name + ":" + o.Version)
		if err != nil {
			return nil, fmt.Errorf("push reference: %w", err)
		}
		if err := remote.WriteIndex(tag, r.Index, append([]remote.Option{remote.WithContext(ctx)}, o.RemoteOptions...)...); err != nil {
			return nil, fmt.Errorf("push %s: %w", tag, err)
		}
		results[i].Pushed = tag.Context().Digest(r.Digest.String()).String()
	}
	if err := os.WriteFile(filepath.Join(out, "digests.txt"), []byte(digests.String()), 0o644); err != nil {
		return nil, err
	}
	return results, nil
}

// sourceDate is SOURCE_DATE_EPOCH, else the commit time of HEAD.
func sourceDate(ctx context.Context, repo string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%ct")
		cmd.Dir = repo
		b, err := cmd.Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("commit time of %s (set SOURCE_DATE_EPOCH outside git): %w", repo, err)
		}
		s = strings.TrimSpace(string(b))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("source date %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// goBuild cross-compiles pkg as the product build does (Makefile GO_PRODUCT_FLAGS):
// static, -trimpath, symbols stripped, version stamped.
func goBuild(ctx context.Context, repo, pkg, goos, goarch, version, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w\n%s", pkg, goos, goarch, err, b)
	}
	return nil
}

// entry is one file of a layer.
type entry struct {
	path string // absolute, in the image
	mode int64
	dir  bool
	uid  int
	body []byte
}

// layerOf writes a layer with fixed times, owners and order (the order given).
func layerOf(entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: strings.TrimPrefix(e.path, "/"), Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: time.Unix(0, 0).UTC(), Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// baseLayer is the static base: what distroless/static holds that a Go binary
// uses (CA certificates, passwd/group with root and nonroot, /tmp).
func baseLayer() (v1.Layer, error) {
	var certs bytes.Buffer
	n := 0
	for r := range bundle.Roots() {
		// A root with a constraint (distrust after a date) cannot be expressed in a
		// PEM bundle; leaving it out is the safe side.
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&certs, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("no CA certificate in the x509roots bundle")
	}
	return layerOf([]entry{
		{path: "/etc", dir: true, mode: 0o755},
		{path: "/etc/group", mode: 0o644, body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{path: "/etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{path: "/etc/ssl", dir: true, mode: 0o755},
		{path: "/etc/ssl/certs", dir: true, mode: 0o755},
		{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: certs.Bytes()},
		{path: "/home", dir: true, mode: 0o755},
		{path: "/home/nonroot", dir: true, mode: 0o700, uid: 65532},
		{path: "/root", dir: true, mode: 0o700},
		{path: "/tmp", dir: true, mode: 0o1777},
	})
}

// platformImage is one platform's image: base, the binary at /<name>, the helpers'
// binaries beside it, the SBOMs.
func platformImage(spec ImageSpec, osName, arch string, base v1.Layer, bin string, sbom []byte, created time.Time, helpers ...helperBinary) (v1.Image, error) {
	body, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	entrypoint := "/" + spec.Name
	dirs := []string{}
	for d := path.Dir(SBOMDir); d != "/"; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var entries []entry
	entries = append(entries, entry{path: entrypoint, mode: 0o755, body: body})
	for _, h := range helpers {
		if h.Name == spec.Name || strings.ContainsAny(h.Name, "/.") {
			return nil, fmt.Errorf("helper binary name %q", h.Name)
		}
		hb, err := os.ReadFile(h.Path)
		if err != nil {
			return nil, err
		}
		entries = append(entries, entry{path: "/" + h.Name, mode: 0o755, body: hb})
	}
	for _, d := range dirs {
		entries = append(entries, entry{path: d, dir: true, mode: 0o755})
	}
	entries = append(entries, entry{path: SBOMDir, dir: true, mode: 0o755},
		entry{path: SBOMDir + "/" + spec.Name + ".spdx.json", mode: 0o644, body: sbom})
	for _, h := range helpers {
		entries = append(entries, entry{path: SBOMDir + "/" + h.Name + ".spdx.json", mode: 0o644, body: h.SBOM})
	}
	app, err := layerOf(entries)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, base, app)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = osName, arch
	cfg.Created = v1.Time{Time: created}
	cfg.Config.Entrypoint = []string{entrypoint}
	cfg.Config.User = spec.User
	cfg.Config.WorkingDir = "/"
	cfg.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cfg.Config.Labels = map[string]string{"org.opencontainers.image.title": spec.Name, "org.opencontainers.image.source": "https://github.com/capi-inplace/capi-inplace"}
	cfg.History = nil
	return mutate.ConfigFile(img, cfg)
}

// writeLayout writes the indexes into a fresh OCI image layout, each annotated
// with its name (org.opencontainers.image.ref.name).
func writeLayout(dir string, results []Result) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, r := range results {
		if err := p.AppendIndex(r.Index, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": r.Name})); err != nil {
			return fmt.Errorf("write %s into %s: %w", r.Name, dir, err)
		}
	}
	return nil
}
