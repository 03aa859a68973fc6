package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestHostWritesStayInsideTheRoot: hostile and ordinary symlinks in the host
// tree never send a write, a read for a backup, or a removal outside the host
// root; every case asserts on the file system, inside and outside the root.
func TestHostWritesStayInsideTheRoot(t *testing.T) {
	ctx := context.Background()
	// A name of this run only: on the old code the write escapes to the agent's /.
	escapedName := fmt.Sprintf("capi-inplace-escape-test-%d.conf", time.Now().UnixNano())
	tests := []struct {
		name string
		// setup builds the host tree; outside is a directory beside the root that
		// must never change.
		setup func(t *testing.T, root, outside string)
		do    func(h *Host) error
		check func(g Gomega, root, outside string, err error)
	}{
		{
			name: "absolute symlink in a parent directory (Debian's /var/run -> /run)",
			setup: func(t *testing.T, root, outside string) {
				symlink(t, "/run", filepath.Join(root, "var/run"))
				if err := os.MkdirAll(filepath.Join(root, "run"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			do: func(h *Host) error {
				return h.WriteFiles(ctx, []protocol.File{{Path: "/var/run/app/pid.conf", Content: []byte("x\n")}})
			},
			check: func(g Gomega, root, _ string, err error) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(readAt(root, "/run/app/pid.conf")).To(Equal("x\n"), "the write lands where the host sees it")
			},
		},
		{
			name: "absolute symlink to a directory outside the root",
			setup: func(t *testing.T, root, outside string) {
				symlink(t, outside, filepath.Join(root, "etc/foo"))
			},
			do: func(h *Host) error {
				return h.WriteFiles(ctx, []protocol.File{{Path: "/etc/foo/x.conf", Content: []byte("x\n")}})
			},
			check: func(g Gomega, root, outside string, err error) {
				g.Expect(exists(filepath.Join(outside, "x.conf"))).To(BeFalse(), "nothing written outside the root")
				if err == nil {
					g.Expect(readAt(root, filepath.Join(outside, "x.conf"))).To(Equal("x\n"), "the link resolves inside the root")
				}
			},
		},
		{
			name: "relative symlink climbing out of the root",
			setup: func(t *testing.T, root, outside string) {
				symlink(t, "../../../../../../../../..", filepath.Join(root, "etc/up"))
			},
			do: func(h *Host) error {
				return h.WriteFiles(ctx, []protocol.File{{Path: "/etc/up/" + escapedName, Content: []byte("x\n")}})
			},
			check: func(g Gomega, root, _ string, err error) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(exists(filepath.Join(filepath.Dir(root), escapedName))).To(BeFalse(), "nothing written beside the root")
				g.Expect(exists("/"+escapedName)).To(BeFalse(), "nothing written at the agent's /")
				g.Expect(readAt(root, escapedName)).To(Equal("x\n"), ".. stops at the root")
			},
		},
		{
			name: "the file itself is a symlink to a file outside the root",
			setup: func(t *testing.T, root, outside string) {
				write(t, outside, "shadow", "secret\n", 0o600)
				symlink(t, filepath.Join(outside, "shadow"), filepath.Join(root, "etc/app.conf"))
			},
			do: func(h *Host) error {
				return h.WriteFiles(ctx, []protocol.File{{Path: "/etc/app.conf", Content: []byte("new\n")}})
			},
			check: func(g Gomega, root, outside string, err error) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(readAt(outside, "shadow")).To(Equal("secret\n"), "the link's target is untouched")
				info, lerr := os.Lstat(filepath.Join(root, "etc/app.conf"))
				g.Expect(lerr).NotTo(HaveOccurred())
				g.Expect(info.Mode().IsRegular()).To(BeTrue(), "the link is replaced by the file")
				g.Expect(readAt(root, "etc/app.conf")).To(Equal("new\n"))
			},
		},
		{
			name: "kubeadm-flags.env under a symlinked /var/lib",
			setup: func(t *testing.T, root, outside string) {
				write(t, outside, "kubelet/kubeadm-flags.env", `KUBELET_KUBEADM_ARGS="--v=1"`+"\n", 0o644)
				symlink(t, outside, filepath.Join(root, "var/lib"))
				write(t, root, filepath.Join(outside, "kubelet/kubeadm-flags.env"), `KUBELET_KUBEADM_ARGS="--v=2"`+"\n", 0o644)
			},
			do: func(h *Host) error { return h.KubeletFlags(ctx, []protocol.Arg{{Name: "max-pods", Value: "50"}}) },
			check: func(g Gomega, root, outside string, err error) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(readAt(outside, "kubelet/kubeadm-flags.env")).To(Equal(`KUBELET_KUBEADM_ARGS="--v=1"`+"\n"), "the container's copy is untouched")
				g.Expect(readAt(root, filepath.Join(outside, "kubelet/kubeadm-flags.env"))).To(Equal(`KUBELET_KUBEADM_ARGS="--v=2 --max-pods=50"` + "\n"))
			},
		},
		{
			name: "backup reads through an absolute symlink inside the root only",
			setup: func(t *testing.T, root, outside string) {
				write(t, outside, "secret.conf", "outside secret\n", 0o600)
				symlink(t, outside, filepath.Join(root, "etc/link"))
			},
			do: func(h *Host) error {
				if err := h.Backup(ctx, "h1", []string{"/etc/link/secret.conf"}); err != nil {
					return err
				}
				return h.Restore(ctx, "h1")
			},
			check: func(g Gomega, root, outside string, err error) {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(readAt(outside, "secret.conf")).To(Equal("outside secret\n"), "the restore of a file that did not exist removes nothing outside")
				raw := readAt(root, (&Host{}).backupDir("h1")+"/manifest.json")
				var entries []backupEntry
				g.Expect(json.Unmarshal([]byte(raw), &entries)).To(Succeed(), raw)
				g.Expect(entries).To(HaveLen(1))
				g.Expect(entries[0].Existed).To(BeFalse(), "the file outside the root was not read")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			base := t.TempDir()
			root, outside := filepath.Join(base, "host"), filepath.Join(base, "outside")
			for _, d := range []string{root, outside} {
				g.Expect(os.MkdirAll(d, 0o755)).To(Succeed())
			}
			tt.setup(t, root, outside)
			h := &Host{Root: root, Runner: &backendtest.Runner{}}
			err := tt.do(h)
			tt.check(g, root, outside, err)
		})
	}
}

// TestSymlinkedSSHDirIsRefused: a user owns their home, so they can point
// ~/.ssh anywhere; the root write of authorized_keys (and its chown to the user)
// must not go through it.
func TestSymlinkedSSHDirIsRefused(t *testing.T) {
	tests := []struct {
		name   string
		target string // the link's target, as the user would write it
		victim string // host path that must not change
	}{
		{"absolute link to root's .ssh", "/root/.ssh", "/root/.ssh"},
		{"relative link to sudoers.d", "../../etc/sudoers.d", "/etc/sudoers.d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			write(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n", 0o644)
			write(t, root, tt.victim+"/authorized_keys", "root's key\n", 0o600)
			g.Expect(os.MkdirAll(filepath.Join(root, "home/alice"), 0o755)).To(Succeed())
			symlink(t, tt.target, filepath.Join(root, "home/alice/.ssh"))
			_ = os.Lchown(filepath.Join(root, "home/alice/.ssh"), 1000, 1000)
			before, err := os.Stat(filepath.Join(root, tt.victim))
			g.Expect(err).NotTo(HaveOccurred())

			h := &Host{Root: root, Runner: &backendtest.Runner{}}
			users, _ := json.Marshal([]User{{Name: "alice", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA alice"}}})
			err = h.ApplyUsers(context.Background(), users)
			g.Expect(err).To(MatchError(ErrSymlinkRefused))
			g.Expect(err.Error()).To(ContainSubstring("/home/alice/.ssh"))

			g.Expect(read(t, root, tt.victim+"/authorized_keys")).To(Equal("root's key\n"))
			entries, _ := os.ReadDir(filepath.Join(root, tt.victim))
			g.Expect(entries).To(HaveLen(1), "nothing added to %s", tt.victim)
			after, err := os.Stat(filepath.Join(root, tt.victim))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(after.Sys().(*syscall.Stat_t).Uid).To(Equal(before.Sys().(*syscall.Stat_t).Uid), "not chowned to the user")
			g.Expect(after.Mode()).To(Equal(before.Mode()))
		})
	}
}

// TestAuthorizedKeysOwnedByTheUser: the ordinary case, with the owner set on the
// descriptors (checked when the test runs as root, as the agent does).
func TestAuthorizedKeysOwnedByTheUser(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1000:1001::/home/alice:/bin/sh\n", 0o644)
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	users, _ := json.Marshal([]User{{Name: "alice", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA alice"}}})
	g.Expect(h.ApplyUsers(context.Background(), users)).To(Succeed())
	g.Expect(read(t, root, "/home/alice/.ssh/authorized_keys")).To(Equal("ssh-ed25519 AAAA alice\n"))
	for p, mode := range map[string]os.FileMode{"/home/alice/.ssh": os.ModeDir | 0o700, "/home/alice/.ssh/authorized_keys": 0o600} {
		info, err := os.Lstat(filepath.Join(root, p))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Mode()).To(Equal(mode), p)
		if os.Geteuid() == 0 {
			st := info.Sys().(*syscall.Stat_t)
			g.Expect([]uint32{st.Uid, st.Gid}).To(Equal([]uint32{1000, 1001}), p)
		}
	}
}

func readAt(root, p string) string {
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return "<missing>"
	}
	return string(b)
}
