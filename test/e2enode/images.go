//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// MirrorAddr is where the lane's registry mirror of registry.k8s.io listens
// (hack/realnode/node.sh configures every node's containerd with it).
var MirrorAddr = hostIP + ":5123"

// ImageMirror is a registry on the lane's host address serving a release's
// control-plane images, as a site mirror of registry.k8s.io would: a node starts
// with its own release's images only (node.sh), so the upgrade's images must come
// from here.
type ImageMirror struct {
	srv *http.Server
	// Refs are the images served, as kubeadm names them (registry.k8s.io/...).
	Refs []string
}

// ServeImages starts the mirror with the images kubeadm <version> lists that the
// lane builds (hack/realnode/build.sh's tarballs), blobs on disk under dir.
func ServeImages(ctx context.Context, cache, version, dir string) (*ImageMirror, error) {
	ln, err := net.Listen("tcp", MirrorAddr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", MirrorAddr, err)
	}
	m := &ImageMirror{srv: &http.Server{
		Handler:           registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)), registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}}
	go func() { _ = m.srv.Serve(ln) }()
	out, err := exec.CommandContext(ctx, filepath.Join(cache, "k8s", version, "kubeadm"), "config", "images", "list", "--kubernetes-version", version).Output()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("kubeadm %s config images list: %w", version, err)
	}
	for _, ref := range strings.Fields(string(out)) {
		repo, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
		tar := filepath.Join(cache, "images", repo+"-"+tag+".tar")
		if _, err := os.Stat(tar); err != nil {
			continue // CoreDNS and kube-proxy: not built, disabled in the lane
		}
		img, err := tarball.ImageFromPath(tar, nil)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("image %s: %w", tar, err)
		}
		dst, err := name.ParseReference(MirrorAddr+"/"+strings.TrimPrefix(ref, "registry.k8s.io/"), name.Insecure)
		if err != nil {
			m.Close()
			return nil, err
		}
		if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
			m.Close()
			return nil, fmt.Errorf("push %s: %w", dst, err)
		}
		m.Refs = append(m.Refs, ref)
	}
	return m, nil
}

// Close stops the mirror.
func (m *ImageMirror) Close() { _ = m.srv.Close() }

// nodeImages lists the image references in the node's containerd (the CRI's
// namespace, what the kubelet and kubeadm see).
func nodeImages(ctx context.Context, n Node) (map[string]bool, error) {
	out, err := lane.Exec(ctx, n, "ctr", "-n", "k8s.io", "images", "ls", "-q")
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, ref := range strings.Fields(out) {
		have[ref] = true
	}
	return have, nil
}

// missingImages returns those of refs the node's containerd does not hold.
func missingImages(ctx context.Context, n Node, refs []string) ([]string, error) {
	have, err := nodeImages(ctx, n)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, r := range refs {
		if !have[r] {
			missing = append(missing, r)
		}
	}
	return missing, nil
}
