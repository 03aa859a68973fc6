package kube

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// stagingSuffix marks a copy in progress beside its destination; a leftover of a
// killed agent is removed by the next install.
const stagingSuffix = ".capi-inplace-download"

// ErrWrongPlatform is wrapped when the plan's binaries are for another platform
// than the node's.
var ErrWrongPlatform = errors.New("binaries are for another platform")

// store is the host's artifact store, where staging put the plan's kubeadm and
// kubelet.
func (h *Host) store() *artifact.Store {
	if h.Store != nil {
		return h.Store
	}
	return &artifact.Store{Root: h.Root}
}

func (h *Host) platform() string { return runtime.GOOS + "/" + h.store().ArchName() }

// staged is one verified copy waiting to be renamed into place.
type staged struct{ tmp, dest string }

// installFromStore puts one binary of bins, KubeadmBinary or KubeletBinary,
// under the host root from the artifact store: the one download path
// (artifact.Store.Fetch: sources and mirrors, size bound, digest, architecture)
// runs during staging, before the node was cordoned; a plan whose files are not
// in the store (an agent restarted with an emptied store) fetches them the same
// way here.
//
// The binary is copied first (beside its destination, hashed while written
// against the plan's digest, fsynced, 0755) and only then renamed into place; a
// binary that already has its digest is left alone, which makes the install
// idempotent. The rename replaces the directory entry, never the file in use: a
// running kubelet keeps its old inode until its restart, and the caller's backup
// (taken before) restores the old binary on rollback.
func (h *Host) installFromStore(ctx context.Context, bins *protocol.KubernetesBinaries, hostPath string) error {
	if err := bins.Validate(); err != nil {
		return fmt.Errorf("kubernetes binaries: %w", err)
	}
	if bins.Platform != h.platform() {
		return fmt.Errorf("%w: the plan's kubeadm and kubelet are for %s, this node is %s", ErrWrongPlatform, bins.Platform, h.platform())
	}
	item := protocol.StageItem{Name: protocol.StageKubeadm, Artifact: bins.Kubeadm, Executable: true}
	if hostPath == KubeletBinary {
		item = protocol.StageItem{Name: protocol.StageKubelet, Artifact: bins.Kubelet, Executable: true}
	}
	s, err := h.stageBinary(ctx, hostPath, item)
	if err != nil || s.tmp == "" {
		return err
	}
	if err := os.Rename(s.tmp, s.dest); err != nil {
		_ = os.Remove(s.tmp)
		return fmt.Errorf("install %s: %w", s.dest, err)
	}
	return atomicfile.SyncDir(filepath.Dir(s.dest))
}

// stageBinary copies one binary from the store into a temporary file in its
// destination's directory (a rename across file systems would fail) and verifies
// the copy. It returns a zero staged when the destination already has the digest.
func (h *Host) stageBinary(ctx context.Context, hostPath string, item protocol.StageItem) (staged, error) {
	name := filepath.Base(hostPath)
	if _, err := protocol.DigestHex(item.Artifact.Digest); err != nil {
		return staged{}, fmt.Errorf("%s: %w", name, err)
	}
	dir, err := realDir(h.Root, filepath.Dir(hostPath))
	if err != nil {
		return staged{}, fmt.Errorf("%s: %w", name, err)
	}
	dest := filepath.Join(dir, name)
	if got, err := artifact.FileDigest(dest); err == nil && got == item.Artifact.Digest {
		if err := os.Chmod(dest, 0o755); err != nil {
			return staged{}, fmt.Errorf("%s: chmod %s: %w", name, hostPath, err)
		}
		return staged{}, nil
	}
	removeLeftovers(dir, name)
	src, err := h.store().Fetch(ctx, item, nil)
	if err != nil {
		return staged{}, err
	}
	in, err := os.Open(src)
	if err != nil {
		return staged{}, fmt.Errorf("%s: open the staged file: %w", name, err)
	}
	defer in.Close()

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
	hash := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, hash), in); err != nil {
		return staged{}, fmt.Errorf("%s: copy the staged file: %w", name, err)
	}
	// The store verified the file; it is hashed again as copied, so a file changed
	// on disk since is never installed.
	if got := protocol.DigestFromSum(hash.Sum(nil)); got != item.Artifact.Digest {
		return staged{}, fmt.Errorf("%s: %w: the staged copy has digest %s, the plan requires %s", name, artifact.ErrDigestMismatch, got, item.Artifact.Digest)
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

// removeLeftovers removes staging files of name that a killed agent left behind.
func removeLeftovers(dir, name string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+name+".*"+stagingSuffix))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// InstallKubeadm makes sure kubeadm of the plan's version is on the node, from
// the artifact store when the plan carries it, otherwise from the host's
// BinarySource or the OS image, and checks its version: kubeadm upgrade runs next.
func (h *Host) InstallKubeadm(ctx context.Context, k protocol.KubernetesPlan) error {
	if err := h.install(ctx, k, KubeadmBinary); err != nil {
		return fmt.Errorf("install kubeadm %s: %w", k.Version, err)
	}
	return h.checkKubeadmVersion(ctx, k.Version)
}

// InstallKubelet puts the kubelet of the plan's version in place, from the same
// sources as InstallKubeadm. It takes effect at the kubelet's restart; the
// kubelet-version gate checks what the restarted kubelet reports.
func (h *Host) InstallKubelet(ctx context.Context, k protocol.KubernetesPlan) error {
	if err := h.install(ctx, k, KubeletBinary); err != nil {
		return fmt.Errorf("install kubelet %s: %w", k.Version, err)
	}
	return nil
}

// install puts one binary (KubeadmBinary or KubeletBinary) of the plan's version
// in place; nothing when the plan delivers none and the host has no source: the
// OS image brings it.
func (h *Host) install(ctx context.Context, k protocol.KubernetesPlan, hostPath string) error {
	switch {
	case k.Binaries != nil:
		return h.installFromStore(ctx, k.Binaries, hostPath)
	case h.Binaries != nil:
		return h.Binaries.Install(ctx, hostPath, k.Version)
	}
	return nil
}
