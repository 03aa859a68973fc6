package kube

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/artifact"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Tiny ELF files for the node's architecture (the artifact store refuses an
// executable built for another one), told apart by their payload.
var (
	newKubeadm = elfFile("kubeadm v1.36.3")
	newKubelet = elfFile("kubelet v1.36.3")
	oldKubeadm = elfFile("kubeadm v1.35.4")
	oldKubelet = elfFile("kubelet v1.35.4")
	testPlat   = runtime.GOOS + "/" + runtime.GOARCH
)

// elfFile is an ELF64 header of an executable for runtime.GOARCH, followed by
// payload: what debug/elf reads to tell the architecture.
func elfFile(payload string) string {
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64, "riscv64": elf.EM_RISCV}
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
	binary.LittleEndian.PutUint16(h[18:], uint16(machines[runtime.GOARCH]))
	binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	binary.LittleEndian.PutUint16(h[52:], 64)
	return string(h) + payload
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// artifactServer serves /v1.36.3/<name> from files and counts requests.
type artifactServer struct {
	files    map[string]string
	requests atomic.Int32
}

func (a *artifactServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.requests.Add(1)
	body, ok := a.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write([]byte(body))
}

func binariesFor(base string) *protocol.KubernetesBinaries {
	return &protocol.KubernetesBinaries{
		Platform: testPlat,
		Kubeadm:  protocol.BinaryArtifact{URL: base + "/v1.36.3/kubeadm", Digest: sha(newKubeadm)},
		Kubelet:  protocol.BinaryArtifact{URL: base + "/v1.36.3/kubelet", Digest: sha(newKubelet)},
	}
}

func oldHost(t *testing.T) string {
	root := t.TempDir()
	write(t, root, KubeadmBinary, oldKubeadm, 0o755)
	write(t, root, KubeletBinary, oldKubelet, 0o755)
	return root
}

// expectUntouched checks that both binaries are the old ones and that no staging
// file is left in /usr/bin.
func expectUntouched(g *WithT, t *testing.T, root string) {
	g.Expect(read(t, root, KubeadmBinary)).To(Equal(oldKubeadm))
	g.Expect(read(t, root, KubeletBinary)).To(Equal(oldKubelet))
	entries, err := os.ReadDir(filepath.Join(root, "/usr/bin"))
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	g.Expect(names).To(ConsistOf("kubeadm", "kubelet"))
}

func inode(g *WithT, p string) uint64 {
	fi, err := os.Stat(p)
	g.Expect(err).NotTo(HaveOccurred())
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestInstallKubeadmThenKubeletFromHTTP: nothing staged (an agent whose store
// was emptied): each install fetches through the artifact store, the one download
// path, and keeps the file there. kubeadm comes first and alone: the kubelet stays
// the old one until its own install, after kubeadm upgrade.
func TestInstallKubeadmThenKubeletFromHTTP(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := &artifactServer{files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet}}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	root := oldHost(t)
	// A staging file a killed agent left behind is cleaned up.
	write(t, root, "/usr/bin/.kubelet.123"+stagingSuffix, "partial", 0o600)
	r := (&backendtest.Runner{}).On("kubeadm version", "v1.36.3\n", nil)
	h := &Host{Root: root, Runner: r}
	p := protocol.NewPlan("n1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.3", Action: protocol.KubeadmUpgradeNode, Binaries: binariesFor(ts.URL)}

	// The backup is taken before either install (backup-files precedes
	// install-kubeadm), so a rollback gets the old binaries back.
	g.Expect(h.BackupSet(p)).To(ContainElements(KubeadmBinary, KubeletBinary))
	g.Expect(h.Backup(ctx, "a1", h.BackupSet(p))).To(Succeed())

	g.Expect(h.InstallKubeadm(ctx, p.Kubernetes)).To(Succeed())
	g.Expect(read(t, root, KubeadmBinary)).To(Equal(newKubeadm))
	g.Expect(read(t, root, KubeletBinary)).To(Equal(oldKubelet), "the kubelet is installed after kubeadm upgrade")
	g.Expect(r.Calls()).To(Equal([]string{"kubeadm version -o short"}))
	g.Expect(srv.requests.Load()).To(Equal(int32(1)))

	g.Expect(h.InstallKubelet(ctx, p.Kubernetes)).To(Succeed())
	g.Expect(read(t, root, KubeletBinary)).To(Equal(newKubelet))
	for _, b := range []string{KubeadmBinary, KubeletBinary} {
		fi, err := os.Stat(filepath.Join(root, b))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o755)))
	}
	g.Expect(srv.requests.Load()).To(Equal(int32(2)))
	g.Expect((&artifact.Store{Root: root}).Has(sha(newKubelet))).To(BeTrue(), "fetched into the store")
	entries, _ := os.ReadDir(filepath.Join(root, "/usr/bin"))
	g.Expect(entries).To(HaveLen(2), "no staging file is left")

	// Repeating either action (a crash after it, a resume) downloads nothing and
	// replaces nothing.
	before := inode(g, filepath.Join(root, KubeletBinary))
	g.Expect(h.InstallKubeadm(ctx, p.Kubernetes)).To(Succeed())
	g.Expect(h.InstallKubelet(ctx, p.Kubernetes)).To(Succeed())
	g.Expect(srv.requests.Load()).To(Equal(int32(2)))
	g.Expect(inode(g, filepath.Join(root, KubeletBinary))).To(Equal(before))

	// Rollback restores what was there before.
	g.Expect(h.Restore(ctx, "a1")).To(Succeed())
	g.Expect(read(t, root, KubeadmBinary)).To(Equal(oldKubeadm))
	g.Expect(read(t, root, KubeletBinary)).To(Equal(oldKubelet))
}

func TestInstallKubernetesBinariesOverHTTPS(t *testing.T) {
	g := NewWithT(t)
	srv := &artifactServer{files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet}}
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()

	// The default client trusts the system's roots only: the test server's own CA
	// is refused, and nothing is replaced.
	root := oldHost(t)
	err := (&Host{Root: root}).installFromStore(context.Background(), binariesFor(ts.URL), KubeletBinary)
	g.Expect(err).To(MatchError(artifact.ErrUnreachable))
	g.Expect(err.Error()).To(ContainSubstring("certificate"))
	expectUntouched(g, t, root)

	// A client that trusts the server's CA downloads over TLS.
	g.Expect((&Host{Root: root, Store: &artifact.Store{Root: root, Client: ts.Client()}}).installFromStore(context.Background(), binariesFor(ts.URL), KubeletBinary)).To(Succeed())
	g.Expect(read(t, root, KubeletBinary)).To(Equal(newKubelet))
}

func TestInstallKubernetesBinariesRefusals(t *testing.T) {
	big := strings.Repeat("x", 4096)
	const shellKubelet = "#!/bin/sh\necho v1.36.3\n"
	tests := []struct {
		name     string
		files    map[string]string
		handler  http.HandlerFunc
		bins     func(base string) *protocol.KubernetesBinaries
		store    artifact.Store
		closed   bool
		wantErr  error
		wantText string
	}{
		{
			name:     "corrupted kubelet: refused, not replaced",
			files:    map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet + "tampered"},
			wantErr:  artifact.ErrDigestMismatch,
			wantText: "kubelet: content does not match its digest: http://",
		},
		{
			name:     "missing file",
			files:    map[string]string{"/v1.36.3/kubeadm": newKubeadm},
			wantErr:  artifact.ErrUnreachable,
			wantText: "404 Not Found",
		},
		{
			name:     "unreachable server",
			closed:   true,
			wantErr:  artifact.ErrUnreachable,
			wantText: "connection refused",
		},
		{
			name:     "oversized body announced by Content-Length",
			files:    map[string]string{"/v1.36.3/kubeadm": big, "/v1.36.3/kubelet": big},
			store:    artifact.Store{MaxBytes: 1024},
			wantErr:  artifact.ErrTooLarge,
			wantText: "announces 4096 bytes, more than 1024",
		},
		{
			name: "oversized streamed body without Content-Length",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				for range 4 {
					_, _ = w.Write([]byte(strings.Repeat("y", 1024)))
					w.(http.Flusher).Flush()
				}
			},
			store:    artifact.Store{MaxBytes: 1024},
			wantErr:  artifact.ErrTooLarge,
			wantText: "is more than 1024 bytes",
		},
		{
			name: "server that stalls past the timeout",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			},
			store:    artifact.Store{Timeout: 300 * time.Millisecond},
			wantErr:  artifact.ErrUnreachable,
			wantText: "Client.Timeout",
		},
		{
			name:  "binaries for another platform",
			files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet},
			bins: func(base string) *protocol.KubernetesBinaries {
				b := binariesFor(base)
				b.Platform = "linux/s390x"
				return b
			},
			wantErr:  ErrWrongPlatform,
			wantText: "are for linux/s390x, this node is " + testPlat,
		},
		{
			name:  "kubelet is no executable of this architecture (a shell script)",
			files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": shellKubelet},
			bins: func(base string) *protocol.KubernetesBinaries {
				b := binariesFor(base)
				b.Kubelet.Digest = sha(shellKubelet)
				return b
			},
			wantErr:  artifact.ErrWrongArchitecture,
			wantText: "kubelet: executable is for another architecture: not an ELF executable",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var handler http.Handler = &artifactServer{files: tt.files}
			if tt.handler != nil {
				handler = tt.handler
			}
			ts := httptest.NewServer(handler)
			defer ts.Close()
			if tt.closed {
				ts.Close()
			}
			bins := binariesFor(ts.URL)
			if tt.bins != nil {
				bins = tt.bins(ts.URL)
			}
			root := oldHost(t)
			store := tt.store
			store.Root = root
			err := (&Host{Root: root, Store: &store}).installFromStore(context.Background(), bins, KubeletBinary)
			g.Expect(err).To(MatchError(tt.wantErr))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantText))
			expectUntouched(g, t, root)
		})
	}
}

// TestInstallKubernetesBinariesFromTheStagedStore: staging fetched kubeadm and
// kubelet into the store before the cordon; the install copies them from there and
// downloads nothing (the source is gone by then). A staged file altered on disk
// since is not installed: the store re-verifies it and fetches again, and with the
// source gone the install fails with nothing replaced.
func TestInstallKubernetesBinariesFromTheStagedStore(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	srv := &artifactServer{files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet}}
	ts := httptest.NewServer(srv)
	root := oldHost(t)
	store := &artifact.Store{Root: root}
	bins := binariesFor(ts.URL)
	for _, it := range []protocol.StageItem{{Name: protocol.StageKubeadm, Artifact: bins.Kubeadm, Executable: true}, {Name: protocol.StageKubelet, Artifact: bins.Kubelet, Executable: true}} {
		_, err := store.Fetch(ctx, it, nil)
		g.Expect(err).NotTo(HaveOccurred())
	}
	ts.Close()
	g.Expect(srv.requests.Load()).To(Equal(int32(2)))

	// Altered in the store: refused, nothing replaced.
	p, err := store.Path(bins.Kubelet.Digest)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(p, []byte(elfFile("evil")), 0o755)).To(Succeed())
	h := &Host{Root: root, Runner: (&backendtest.Runner{}).On("kubeadm version", "v1.36.3\n", nil), Store: store}
	k := protocol.KubernetesPlan{Version: "v1.36.3", Binaries: bins}
	err = h.InstallKubelet(ctx, k)
	g.Expect(err).To(MatchError(artifact.ErrUnreachable))
	expectUntouched(g, t, root)

	// Staged intact: installed from the store alone.
	g.Expect(os.WriteFile(p, []byte(newKubelet), 0o600)).To(Succeed())
	g.Expect(h.InstallKubeadm(ctx, k)).To(Succeed())
	g.Expect(h.InstallKubelet(ctx, k)).To(Succeed())
	g.Expect(read(t, root, KubeadmBinary)).To(Equal(newKubeadm))
	g.Expect(read(t, root, KubeletBinary)).To(Equal(newKubelet))
	g.Expect(srv.requests.Load()).To(Equal(int32(2)), "nothing downloaded at install")
}

func TestInstallKubernetesBinariesWithoutArtifacts(t *testing.T) {
	// A plan without binaries keeps today's behaviour: kubeadm must already be
	// the plan's version (OS image or package source).
	g := NewWithT(t)
	r := (&backendtest.Runner{}).On("kubeadm version", "v1.35.4\n", nil)
	h := &Host{Root: oldHost(t), Runner: r}
	err := h.InstallKubeadm(context.Background(), protocol.KubernetesPlan{Version: "v1.36.3"})
	g.Expect(err).To(MatchError(ContainSubstring("kubeadm on the node is v1.35.4, the plan needs v1.36.3")))
}

func TestInstallKubernetesBinariesStaysInsideTheRoot(t *testing.T) {
	// /usr/bin under the host root pointing outside of it: nothing is written
	// there, and nothing is downloaded.
	g := NewWithT(t)
	srv := &artifactServer{files: map[string]string{"/v1.36.3/kubeadm": newKubeadm, "/v1.36.3/kubelet": newKubelet}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	root, outside := t.TempDir(), t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "usr"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(root, "usr", "bin"))).To(Succeed())
	err := (&Host{Root: root}).installFromStore(context.Background(), binariesFor(ts.URL), KubeletBinary)
	g.Expect(err).To(MatchError(ContainSubstring("/usr/bin is not a directory (a symlink is refused)")))
	entries, _ := os.ReadDir(outside)
	g.Expect(entries).To(BeEmpty())
	g.Expect(srv.requests.Load()).To(BeZero())
}
