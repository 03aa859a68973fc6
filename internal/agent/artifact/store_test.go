package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// testExecutable is a real ELF executable of this machine's architecture: the
// test binary itself.
func testExecutable(t *testing.T) []byte {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fileServer serves files by path, counting GETs; corrupt flips a byte of every body.
type fileServer struct {
	files   map[string][]byte
	gets    atomic.Int32
	corrupt atomic.Bool
	chunked bool
}

func (f *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, ok := f.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	f.gets.Add(1)
	if f.corrupt.Load() {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	if f.chunked {
		w.Header().Set("Transfer-Encoding", "chunked")
		for len(b) > 0 {
			n := min(len(b), 64<<10)
			_, _ = w.Write(b[:n])
			w.(http.Flusher).Flush()
			b = b[n:]
		}
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func storeDirEntries(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(s.dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestFetchHTTP(t *testing.T) {
	g := NewWithT(t)
	exe := testExecutable(t)
	bundle := bytes.Repeat([]byte("rauc bundle "), 100000)
	fs := &fileServer{files: map[string][]byte{"/v1.36.3/kubeadm": exe, "/os/bundle.raucb": bundle}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	kubeadm := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
		Artifact: protocol.BinaryArtifact{URL: srv.URL + "/v1.36.3/kubeadm", Digest: digestOf(exe)}}
	otherArch := "arm64"
	if runtime.GOARCH == "arm64" {
		otherArch = "amd64"
	}

	tests := []struct {
		name    string
		item    protocol.StageItem
		store   func(*Store)
		corrupt bool
		wantErr error
	}{
		{name: "executable of the node's architecture", item: kubeadm},
		{name: "bundle, not an executable", item: protocol.StageItem{Name: protocol.StageOSImage,
			Artifact: protocol.BinaryArtifact{URL: srv.URL + "/os/bundle.raucb", Digest: digestOf(bundle)}}},
		{name: "unreachable mirror, then the origin", item: protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
			Artifact: protocol.BinaryArtifact{URL: kubeadm.Artifact.URL, Digest: kubeadm.Artifact.Digest, Mirrors: []string{deadURL + "/v1.36.3/kubeadm"}}}},
		{name: "mirror serves it, origin down", item: protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
			Artifact: protocol.BinaryArtifact{URL: deadURL + "/kubeadm", Digest: kubeadm.Artifact.Digest, Mirrors: []string{kubeadm.Artifact.URL}}}},
		{name: "corrupted artifact", item: kubeadm, corrupt: true, wantErr: ErrDigestMismatch},
		{name: "unreachable source", item: protocol.StageItem{Name: protocol.StageKubelet,
			Artifact: protocol.BinaryArtifact{URL: deadURL + "/kubelet", Digest: kubeadm.Artifact.Digest}}, wantErr: ErrUnreachable},
		{name: "404", item: protocol.StageItem{Name: protocol.StageKubelet,
			Artifact: protocol.BinaryArtifact{URL: srv.URL + "/nothing", Digest: kubeadm.Artifact.Digest}}, wantErr: ErrUnreachable},
		{name: "executable for another architecture", item: kubeadm, store: func(s *Store) { s.Arch = otherArch }, wantErr: ErrWrongArchitecture},
		{name: "larger than the limit", item: kubeadm, store: func(s *Store) { s.MaxBytes = 1 << 10 }, wantErr: ErrTooLarge},
		{name: "announced size leaves no room", item: kubeadm, store: func(s *Store) { s.ReserveBytes = 1 << 62 }, wantErr: ErrDiskFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			s := &Store{Root: t.TempDir()}
			if tt.store != nil {
				tt.store(s)
			}
			fs.corrupt.Store(tt.corrupt)
			defer fs.corrupt.Store(false)
			p, err := s.Fetch(context.Background(), tt.item, nil)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(err.Error()).To(ContainSubstring(string(tt.item.Name)))
				g.Expect(storeDirEntries(t, s)).To(BeEmpty(), "nothing stays in the store, no partial file")
				g.Expect(s.Has(tt.item.Artifact.Digest)).To(BeFalse())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			got, err := os.ReadFile(p)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(digestOf(got)).To(Equal(tt.item.Artifact.Digest))
			g.Expect(p).To(Equal(filepath.Join(s.Root, protocol.ArtifactPath(tt.item.Artifact.Digest))))
			g.Expect(storeDirEntries(t, s)).To(HaveLen(1))
		})
	}

	// A staged artifact is not fetched again.
	s := &Store{Root: t.TempDir()}
	_, err := s.Fetch(context.Background(), kubeadm, nil)
	g.Expect(err).NotTo(HaveOccurred())
	before := fs.gets.Load()
	_, err = s.Fetch(context.Background(), kubeadm, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fs.gets.Load()).To(Equal(before))
	g.Expect(s.Has(kubeadm.Artifact.Digest)).To(BeTrue())
	// A staged file changed on disk is not taken for staged: it is fetched again.
	p, _ := s.Path(kubeadm.Artifact.Digest)
	g.Expect(os.WriteFile(p, []byte("tampered"), 0o600)).To(Succeed())
	g.Expect(s.Has(kubeadm.Artifact.Digest)).To(BeFalse())
	_, err = s.Fetch(context.Background(), kubeadm, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fs.gets.Load()).To(Equal(before + 1))
	// Prune keeps only the named digests.
	_, err = s.Fetch(context.Background(), kubeadm, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Prune(nil)).To(Succeed())
	g.Expect(storeDirEntries(t, s)).To(BeEmpty())
}

// corruptBlobs flips a byte of every blob body the registry serves.
type corruptBlobs struct {
	next http.Handler
	on   atomic.Bool
}

type flipWriter struct {
	http.ResponseWriter
	done bool
}

func (w *flipWriter) Write(b []byte) (int, error) {
	if !w.done && len(b) > 0 {
		b = bytes.Clone(b)
		b[0] ^= 0xff
		w.done = true
	}
	return w.ResponseWriter.Write(b)
}

func (c *corruptBlobs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.on.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
		w = &flipWriter{ResponseWriter: w}
	}
	c.next.ServeHTTP(w, r)
}

func TestFetchOCI(t *testing.T) {
	g := NewWithT(t)
	reg := &corruptBlobs{next: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}
	srv := httptest.NewServer(reg)
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	exe := testExecutable(t)
	// Push the binary as an OCI artifact's one blob, as `oras push` does.
	repo, err := name.NewRepository(host+"/k8s/kubeadm", name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(remote.WriteLayer(repo, static.NewLayer(exe, types.MediaType("application/vnd.k8s.binary")))).To(Succeed())

	item := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true,
		Artifact: protocol.BinaryArtifact{URL: "oci+http://" + host + "/k8s/kubeadm", Digest: digestOf(exe)}}

	s := &Store{Root: t.TempDir()}
	var progressed atomic.Int64
	p, err := s.Fetch(context.Background(), item, func(n, size int64) { progressed.Store(n); g.Expect(size).To(Equal(int64(len(exe)))) })
	g.Expect(err).NotTo(HaveOccurred())
	got, err := os.ReadFile(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(digestOf(got)).To(Equal(item.Artifact.Digest))
	g.Expect(progressed.Load()).To(Equal(int64(len(exe))))

	// A blob the registry does not have.
	missing := protocol.StageItem{Name: protocol.StageKubelet, Executable: true,
		Artifact: protocol.BinaryArtifact{URL: item.Artifact.URL, Digest: digestOf([]byte("never pushed"))}}
	_, err = (&Store{Root: t.TempDir()}).Fetch(context.Background(), missing, nil)
	g.Expect(err).To(MatchError(ErrUnreachable))
	g.Expect(err.Error()).To(ContainSubstring("404"))

	// An air-gapped site: the origin registry is out of reach, its mirror serves the blob.
	dead := httptest.NewServer(http.NotFoundHandler())
	deadHost := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	mirrored := protocol.StageItem{Name: protocol.StageKubeadm, Executable: true, Artifact: protocol.BinaryArtifact{
		URL: "oci://" + deadHost + "/k8s/kubeadm", Digest: item.Artifact.Digest, Mirrors: []string{item.Artifact.URL}}}
	_, err = (&Store{Root: t.TempDir()}).Fetch(context.Background(), mirrored, nil)
	g.Expect(err).NotTo(HaveOccurred())

	// A registry serving corrupted content.
	reg.on.Store(true)
	s = &Store{Root: t.TempDir()}
	_, err = s.Fetch(context.Background(), item, nil)
	g.Expect(err).To(MatchError(ErrDigestMismatch))
	g.Expect(storeDirEntries(t, s)).To(BeEmpty())
}

// TestFetchFullDisk fills a real small file system (tmpfs, so root only).
func TestFetchFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	g := NewWithT(t)
	root := t.TempDir()
	dir := filepath.Join(root, protocol.ArtifactDir)
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("umount", dir).Run() }()

	big := bytes.Repeat([]byte{0x5a}, 3<<20)
	fs := &fileServer{files: map[string][]byte{"/bundle": big}, chunked: true}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	item := protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: srv.URL + "/bundle", Digest: digestOf(big)}}

	// No size announced and no reserve: the write itself runs out of room.
	s := &Store{Root: root, ReserveBytes: -1}
	_, err := s.Fetch(context.Background(), item, nil)
	g.Expect(err).To(MatchError(ErrDiskFull))
	g.Expect(storeDirEntries(t, s)).To(BeEmpty(), "the partial file is removed")

	// Announced: refused before anything is written.
	fs.chunked = false
	before := fs.gets.Load()
	_, err = s.Fetch(context.Background(), item, nil)
	g.Expect(err).To(MatchError(ErrDiskFull))
	g.Expect(err.Error()).To(ContainSubstring("free on the disk"))
	g.Expect(fs.gets.Load()).To(Equal(before + 1))
	g.Expect(storeDirEntries(t, s)).To(BeEmpty())
}

// TestFetchKeepsTheReserveWhileStreaming: a source that announces no size (a
// chunked body) is stopped before it eats into the reserve, on a real small file
// system (tmpfs, so root only), and its partial file is removed. Before, the reserve
// was checked only against an announced size: the body filled the disk to ENOSPC.
func TestFetchKeepsTheReserveWhileStreaming(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	const reserve = 8 << 20
	g := NewWithT(t)
	root := t.TempDir()
	dir := filepath.Join(root, protocol.ArtifactDir)
	g.Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("umount", dir).Run() }()

	// The server looks at the disk's free space before each chunk it sends.
	free := func() int64 {
		f, ok := freeBytes(dir)
		if !ok {
			t.Fatal("statfs of the tmpfs")
		}
		return f
	}
	var lowest atomic.Int64
	lowest.Store(free())
	big := bytes.Repeat([]byte{0x5a}, 12<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for b := big; len(b) > 0; {
			if f := free(); f < lowest.Load() {
				lowest.Store(f)
			}
			n := min(len(b), 64<<10)
			if _, err := w.Write(b[:n]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			b = b[n:]
		}
	}))
	defer srv.Close()
	item := protocol.StageItem{Name: protocol.StageOSImage, Artifact: protocol.BinaryArtifact{URL: srv.URL + "/bundle", Digest: digestOf(big)}}

	s := &Store{Root: root, ReserveBytes: reserve}
	_, err := s.Fetch(context.Background(), item, nil)
	g.Expect(err).To(MatchError(ErrDiskFull))
	g.Expect(storeDirEntries(t, s)).To(BeEmpty(), "the partial file is removed")
	t.Logf("lowest free space seen during the download: %d KiB (reserve %d KiB)", lowest.Load()>>10, reserve>>10)
	g.Expect(lowest.Load()).To(BeNumerically(">=", reserve), "the download never ate into the reserve")
	g.Expect(free()).To(BeNumerically(">", reserve), "the space is given back")
}
