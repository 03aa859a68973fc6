package lanekit

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

// Registry is an OCI registry over plain HTTP, blobs on disk: the lane's mirror of
// registry.k8s.io and the registry of its own images. Nodes reach it through their
// containerd's mirror configuration.
type Registry struct {
	// Addr is host:port.
	Addr string
	srv  *http.Server
	// Refs are the registry.k8s.io images PushRelease pushed, as kubeadm names them.
	Refs []string
}

// StartRegistry serves a registry on addr with its blobs under dir.
func StartRegistry(addr, dir string) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	r := &Registry{Addr: ln.Addr().String(), srv: &http.Server{
		Handler:           registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)), registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Close stops the registry.
func (r *Registry) Close() { _ = r.srv.Close() }

// Push pushes the image of a docker-archive tarball under ref's repository and tag
// (ref's registry host is replaced by this registry's address).
func (r *Registry) Push(ctx context.Context, ref, tar string) error {
	img, err := tarball.ImageFromPath(tar, nil)
	if err != nil {
		return fmt.Errorf("image %s: %w", tar, err)
	}
	path := ref
	if i := strings.Index(ref, "/"); i > 0 && strings.ContainsAny(ref[:i], ".:") {
		path = ref[i+1:]
	}
	dst, err := name.ParseReference(r.Addr+"/"+path, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", dst, err)
	}
	return nil
}

// PushRelease pushes the images kubeadm <version> lists that the real-node lane
// builds (hack/realnode/build.sh's tarballs under cache/images, kubeadm under
// cache/k8s/<version>) and records them in Refs.
func (r *Registry) PushRelease(ctx context.Context, cache, version string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(cache, "k8s", version, "kubeadm"), "config", "images", "list", "--kubernetes-version", version).Output()
	if err != nil {
		return fmt.Errorf("kubeadm %s config images list: %w", version, err)
	}
	for _, ref := range strings.Fields(string(out)) {
		repo, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
		tar := filepath.Join(cache, "images", repo+"-"+tag+".tar")
		if _, err := os.Stat(tar); err != nil {
			continue // CoreDNS and kube-proxy: not built, disabled in the lanes
		}
		if err := r.Push(ctx, ref, tar); err != nil {
			return err
		}
		r.Refs = append(r.Refs, ref)
	}
	return nil
}
