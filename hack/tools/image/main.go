// Command image assembles OCI images from local files without a Docker engine, with
// go-containerregistry: one layer of the given files on an empty base, a fixed
// creation time so that the same inputs give the same digest, and a
// docker-archive tarball that `ctr images import` (and crane) read.
//
// usage:
//
//	image -tag registry.k8s.io/kube-apiserver:v1.36.3 -out x.tar \
//	      -file /abs/path/kube-apiserver=/usr/local/bin/kube-apiserver \
//	      [-entrypoint /usr/local/bin/kube-apiserver] [-user 65532] [-platform linux/amd64]
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var (
		files      fileList
		tags       fileList
		out        = flag.String("out", "", "Output docker-archive tarball.")
		entrypoint = flag.String("entrypoint", "", "Entrypoint (space-separated argv); empty for none.")
		user       = flag.String("user", "", "User to run as (e.g. 65532); empty for root.")
		platform   = flag.String("platform", "linux/amd64", "os/arch of the image.")
		digestOut  = flag.String("digest-file", "", "Write the image digest (sha256:...) to this file.")
	)
	flag.Var(&files, "file", "source=destination (absolute path in the image); repeatable.")
	flag.Var(&tags, "tag", "Image reference to tag the image with; repeatable.")
	flag.Parse()
	if err := run(files, tags, *out, *entrypoint, *user, *platform, *digestOut); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(files, tags []string, out, entrypoint, user, platform, digestOut string) error {
	if out == "" || len(tags) == 0 || len(files) == 0 {
		return fmt.Errorf("-out, -tag and -file are required")
	}
	osName, arch, ok := strings.Cut(platform, "/")
	if !ok {
		return fmt.Errorf("-platform %q: want os/arch", platform)
	}
	layerTar, err := layerOf(files)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = osName, arch
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cfg.Config.User = user
	if entrypoint != "" {
		cfg.Config.Entrypoint = strings.Fields(entrypoint)
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		ref, err := name.NewTag(t)
		if err != nil {
			return fmt.Errorf("tag %q: %w", t, err)
		}
		refs[ref] = img
	}
	tmp := out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	if digestOut != "" {
		if err := os.WriteFile(digestOut, []byte(d.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Println(d.String())
	return nil
}

// layerOf writes one uncompressed layer tarball with the files, their parent
// directories, fixed modes and times, and entries in a fixed order.
func layerOf(files []string) ([]byte, error) {
	type entry struct{ src, dst string }
	var entries []entry
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok || !path.IsAbs(dst) {
			return nil, fmt.Errorf("-file %q: want source=/absolute/destination", f)
		}
		entries = append(entries, entry{src, path.Clean(dst)})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].dst < entries[j].dst })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	epoch := time.Unix(0, 0).UTC()
	for _, e := range entries {
		var parents []string
		for d := path.Dir(e.dst); d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		b, err := os.ReadFile(e.src)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(e.src)
		if err != nil {
			return nil, err
		}
		mode := int64(0o644)
		if st.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(e.dst, "/"), Mode: mode, Size: int64(len(b)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
