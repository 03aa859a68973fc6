package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Bounds of one binary download. kubelet and kubeadm are 50-120 MiB; a body past
// the size bound is refused before it fills the node's disk.
const (
	DefaultMaxBinaryBytes  int64 = 512 << 20
	DefaultDownloadTimeout       = 10 * time.Minute
	// stagingSuffix marks a download in progress beside its destination; a
	// leftover of a killed agent is removed by the next Install.
	stagingSuffix = ".capi-inplace-download"
)

var (
	// ErrDigestMismatch is wrapped (by *DigestMismatchError) when a downloaded
	// binary does not hash to the plan's digest: nothing is replaced.
	ErrDigestMismatch = errors.New("downloaded binary does not match its digest")
	// ErrBinaryTooLarge is wrapped when a download exceeds HTTPBinaries.MaxBytes.
	ErrBinaryTooLarge = errors.New("download exceeds the size limit")
	// ErrWrongPlatform is wrapped when the plan's binaries are for another
	// platform than the agent's.
	ErrWrongPlatform = errors.New("binaries are for another platform")
	// ErrDownload is wrapped when a binary cannot be fetched (unreachable server,
	// HTTP error status, interrupted body).
	ErrDownload = errors.New("download failed")
)

// DigestMismatchError reports a binary whose content is not what the plan names.
type DigestMismatchError struct {
	Binary string
	URL    string
	Want   string
	Got    string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("%s from %s has digest %s, the plan requires %s", e.Binary, e.URL, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrDigestMismatch) hold.
func (e *DigestMismatchError) Is(target error) bool { return target == ErrDigestMismatch }

// HTTPBinaries puts the plan's kubeadm and kubelet on the host from their http(s)
// URLs, each verified by its sha256 digest. The zero value is ready to use.
//
// Both binaries are staged first (downloaded beside their destination, hashed while
// written, size-bounded, fsynced, 0755) and only then renamed into place, so a
// failure of either replaces neither; a binary that already has its digest is left
// alone, which makes Install idempotent. The rename replaces the directory entry,
// never the file in use: a running kubelet keeps its old inode until its restart,
// and the caller's backup (taken before) restores the old binaries on rollback.
type HTTPBinaries struct {
	// Client fetches the URLs; nil means a client with the system's trust roots,
	// the proxy from the environment and Timeout.
	Client *http.Client
	// MaxBytes bounds one binary; 0 means DefaultMaxBinaryBytes.
	MaxBytes int64
	// Timeout bounds one download when Client is nil; 0 means DefaultDownloadTimeout.
	Timeout time.Duration
	// Platform is the agent's "<os>/<arch>"; "" means runtime.GOOS/runtime.GOARCH.
	Platform string
	// Staged opens the file of a digest that the agent fetched before the node was
	// cordoned (artifact.Store.Open); nil, or an error from it, means download.
	// What it yields is hashed like a download.
	Staged func(digest string) (io.ReadCloser, error)
}

func (b *HTTPBinaries) client() *http.Client {
	if b.Client != nil {
		return b.Client
	}
	timeout := b.Timeout
	if timeout == 0 {
		timeout = DefaultDownloadTimeout
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t, Timeout: timeout}
}

func (b *HTTPBinaries) maxBytes() int64 {
	if b.MaxBytes > 0 {
		return b.MaxBytes
	}
	return DefaultMaxBinaryBytes
}

func (b *HTTPBinaries) platform() string {
	if b.Platform != "" {
		return b.Platform
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// staged is one verified download waiting to be renamed into place.
type staged struct{ tmp, dest string }

// Install puts kubeadm and kubelet of bins under the host root.
func (b *HTTPBinaries) Install(ctx context.Context, root string, bins *protocol.KubernetesBinaries) error {
	if bins == nil {
		return nil
	}
	if err := bins.Validate(); err != nil {
		return fmt.Errorf("kubernetes binaries: %w", err)
	}
	if bins.Platform != b.platform() {
		return fmt.Errorf("%w: the plan's kubeadm and kubelet are for %s, this node is %s", ErrWrongPlatform, bins.Platform, b.platform())
	}
	var ready []staged
	cleanup := func() {
		for _, s := range ready {
			_ = os.Remove(s.tmp)
		}
	}
	for _, item := range []struct {
		hostPath string
		artifact protocol.BinaryArtifact
	}{{KubeadmBinary, bins.Kubeadm}, {KubeletBinary, bins.Kubelet}} {
		s, err := b.stage(ctx, root, item.hostPath, item.artifact)
		if err != nil {
			cleanup()
			return err
		}
		if s.tmp != "" {
			ready = append(ready, s)
		}
	}
	dirs := map[string]bool{}
	for i, s := range ready {
		if err := os.Rename(s.tmp, s.dest); err != nil {
			// Binaries renamed before stay: the backup taken before this action
			// restores them on rollback, and a repeat finds them in place.
			for _, rest := range ready[i:] {
				_ = os.Remove(rest.tmp)
			}
			return fmt.Errorf("install %s: %w", s.dest, err)
		}
		dirs[filepath.Dir(s.dest)] = true
	}
	for d := range dirs {
		if err := atomicfile.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// stage downloads one binary into a temporary file in its destination's directory
// (a rename across file systems would fail) and verifies it. It returns a zero
// staged when the destination already has the digest.
func (b *HTTPBinaries) stage(ctx context.Context, root, hostPath string, a protocol.BinaryArtifact) (staged, error) {
	name := filepath.Base(hostPath)
	wantHex, err := protocol.DigestHex(a.Digest)
	if err != nil {
		return staged{}, fmt.Errorf("%s: %w", name, err)
	}
	dir, err := realDir(root, filepath.Dir(hostPath))
	if err != nil {
		return staged{}, fmt.Errorf("%s: %w", name, err)
	}
	dest := filepath.Join(dir, name)
	if got, err := regularFileSHA256(dest); err == nil && got == wantHex {
		if err := os.Chmod(dest, 0o755); err != nil {
			return staged{}, fmt.Errorf("%s: chmod %s: %w", name, hostPath, err)
		}
		return staged{}, nil
	}
	removeLeftovers(dir, name)

	tmp, err := os.CreateTemp(dir, "."+name+".*"+stagingSuffix)
	if err != nil {
		return staged{}, fmt.Errorf("%s: create staging file in %s: %w", name, filepath.Dir(hostPath), err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	if err := b.fetch(ctx, name, a, io.MultiWriter(tmp, h)); err != nil {
		return staged{}, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantHex {
		return staged{}, fmt.Errorf("%s: %w", name, &DigestMismatchError{Binary: name, URL: a.URL, Want: a.Digest, Got: "sha256:" + got})
	}
	if err := tmp.Chmod(0o755); err != nil {
		return staged{}, fmt.Errorf("%s: chmod staging file: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return staged{}, fmt.Errorf("%s: fsync staging file: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return staged{}, fmt.Errorf("%s: close staging file: %w", name, err)
	}
	ok = true
	return staged{tmp: tmp.Name(), dest: dest}, nil
}

// fetch writes the artifact to w: from the staged copy when there is one,
// otherwise downloaded from its first http(s) source.
func (b *HTTPBinaries) fetch(ctx context.Context, name string, a protocol.BinaryArtifact, w io.Writer) error {
	if b.Staged != nil {
		if rc, err := b.Staged(a.Digest); err == nil {
			defer rc.Close()
			if _, err := io.Copy(w, io.LimitReader(rc, b.maxBytes()+1)); err != nil {
				return fmt.Errorf("%s: copy the staged file: %w", name, err)
			}
			return nil
		}
	}
	// One source only: w may hold part of a failed body, which only a fresh
	// start could verify. Fallback across mirrors is the stager's.
	for _, src := range a.Sources() {
		if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
			return b.download(ctx, name, src, w)
		}
	}
	return fmt.Errorf("%s: %w: nothing staged and no http(s) source (an OCI source is fetched while the node stages the plan, before it is cordoned)", name, ErrDownload)
}

// download writes the body of url to w, at most maxBytes of it.
func (b *HTTPBinaries) download(ctx context.Context, name, url string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", name, ErrDownload, err)
	}
	resp, err := b.client().Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", name, ErrDownload, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %w: GET %s: %s", name, ErrDownload, url, resp.Status)
	}
	limit := b.maxBytes()
	if resp.ContentLength > limit {
		return fmt.Errorf("%s: %w: %s announces %d bytes, more than %d", name, ErrBinaryTooLarge, url, resp.ContentLength, limit)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("%s: %w: read %s: %w", name, ErrDownload, url, err)
	}
	if n > limit {
		return fmt.Errorf("%s: %w: %s is more than %d bytes", name, ErrBinaryTooLarge, url, limit)
	}
	return nil
}

// realDir returns the agent's path of a host directory whose every component
// under the root is a real directory, so that writes there stay inside the host
// root (a symlinked /usr or /usr/bin, which no distribution ships, is refused).
// The binary itself is never followed: a symlink there is replaced by the rename.
func realDir(root, hostDir string) (string, error) {
	p := root
	for _, seg := range strings.Split(strings.Trim(hostDir, "/"), "/") {
		p = filepath.Join(p, seg)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", fmt.Errorf("host directory %s: %w", hostDir, err)
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("host directory %s: %s is not a directory (a symlink is refused)", hostDir, strings.TrimPrefix(p, root))
		}
	}
	return p, nil
}

// regularFileSHA256 returns the hex sha256 of a regular file (not followed if a
// symlink).
func regularFileSHA256(p string) (string, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// removeLeftovers removes staging files of name that a killed agent left behind.
func removeLeftovers(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+".*"+stagingSuffix))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// InstallKubernetesBinaries makes sure kubeadm and kubelet of the plan's version
// are on the node: downloaded and verified when the plan carries them, otherwise
// from the host's BinarySource or the OS image; then kubeadm's version is checked.
func (h *Host) InstallKubernetesBinaries(ctx context.Context, k protocol.KubernetesPlan) error {
	if k.Binaries == nil {
		return h.InstallBinaries(ctx, k.Version)
	}
	d := h.Downloads
	if d == nil {
		d = &HTTPBinaries{}
	}
	if err := d.Install(ctx, h.Root, k.Binaries); err != nil {
		return fmt.Errorf("install kubeadm and kubelet %s: %w", k.Version, err)
	}
	return h.checkKubeadmVersion(ctx, k.Version)
}
