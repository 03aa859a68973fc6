package kube

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestRollbackRefusesAUserOwnedSymlink: between the forward write of a user's
// authorized_keys and the rollback, the user (who owns their home) swaps ~/.ssh
// for a symlink to root's. The rollback refuses to go through it and says where;
// root's authorized_keys is untouched, whether the backup says the file was
// absent (a removal) or held keys (a write).
func TestRollbackRefusesAUserOwnedSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the home directory must belong to another user")
	}
	tests := []struct {
		name   string
		before string // alice's authorized_keys before the update; "" for none
	}{
		{name: "the backup says absent: a removal", before: ""},
		{name: "the backup holds keys: a write", before: "ssh-ed25519 AAAA old\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			root := t.TempDir()
			write(t, root, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n", 0o644)
			write(t, root, "/root/.ssh/authorized_keys", "root's key\n", 0o600)
			home := filepath.Join(root, "home/alice")
			g.Expect(os.MkdirAll(home, 0o755)).To(Succeed())
			if tt.before != "" {
				write(t, root, "/home/alice/.ssh/authorized_keys", tt.before, 0o600)
				g.Expect(os.Chown(filepath.Join(home, ".ssh"), 1000, 1000)).To(Succeed())
			}
			g.Expect(os.Chown(home, 1000, 1000)).To(Succeed())

			h := &Host{Root: root, Runner: &backendtest.Runner{}}
			users, _ := json.Marshal([]User{{Name: "alice", SSHAuthorizedKeys: []string{"ssh-ed25519 AAAA new"}}})
			plan := protocol.NewPlan("n1")
			plan.Users = users
			g.Expect(h.Backup(ctx, "a1", h.BackupSet(plan))).To(Succeed())
			g.Expect(h.ApplyUsers(ctx, users)).To(Succeed())

			// The user swaps their ~/.ssh for a link to root's.
			g.Expect(os.RemoveAll(filepath.Join(home, ".ssh"))).To(Succeed())
			g.Expect(os.Symlink("../../root/.ssh", filepath.Join(home, ".ssh"))).To(Succeed())
			g.Expect(os.Lchown(filepath.Join(home, ".ssh"), 1000, 1000)).To(Succeed())

			err := h.Restore(ctx, "a1")
			g.Expect(err).To(MatchError(ErrSymlinkRefused))
			g.Expect(err.Error()).To(ContainSubstring("/home/alice/.ssh"))
			g.Expect(read(t, root, "/root/.ssh/authorized_keys")).To(Equal("root's key\n"))
			info, err := os.Stat(filepath.Join(root, "/root/.ssh/authorized_keys"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
			entries, err := os.ReadDir(filepath.Join(root, "root/.ssh"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(entries).To(HaveLen(1), "nothing written beside root's key")
		})
	}
}

// TestRootOwnedSymlinksAreFollowed: a symlink root made (Debian's /var/run ->
// /run, a relative /lib -> usr/lib) still resolves inside the root, for a write
// and a removal.
func TestRootOwnedSymlinksAreFollowed(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "run"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "usr/lib/x"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "var"), 0o755)).To(Succeed())
	g.Expect(os.Symlink("/run", filepath.Join(root, "var/run"))).To(Succeed())
	g.Expect(os.Symlink("usr/lib", filepath.Join(root, "lib"))).To(Succeed())
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	g.Expect(h.writeHostFile("/var/run/app/pid", []byte("1\n"), 0o644, -1, -1)).To(Succeed())
	g.Expect(read(t, root, "/run/app/pid")).To(Equal("1\n"))
	g.Expect(h.writeHostFile("/lib/x/y", []byte("2\n"), 0o644, -1, -1)).To(Succeed())
	g.Expect(read(t, root, "/usr/lib/x/y")).To(Equal("2\n"))
	g.Expect(h.removeHostFile("/lib/x/y")).To(Succeed())
	_, err := os.Lstat(filepath.Join(root, "usr/lib/x/y"))
	g.Expect(os.IsNotExist(err)).To(BeTrue())
}

// TestPinDirStaysInTheHostRoot: the agent's state directory (journal, node key,
// artifact store) under an absolute symlink (/var/lib -> /srv/lib) lands where
// the host sees it, inside the root, not in the agent's container; under a
// symlink in a directory another user owns it is refused.
func TestPinDirStaysInTheHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a directory must belong to another user")
	}
	g := NewWithT(t)
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "srv/lib"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(root, "var"), 0o755)).To(Succeed())
	g.Expect(os.Symlink("/srv/lib", filepath.Join(root, "var/lib"))).To(Succeed())
	h := &Host{Root: root, Runner: &backendtest.Runner{}}

	dir, release, err := h.PinDir(WorkDir, 0o700)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "journal.json"), []byte("{}"), 0o600)).To(Succeed())
	release()
	g.Expect(read(t, root, "/srv/lib/capi-inplace/journal.json")).To(Equal("{}"))
	info, err := os.Stat(filepath.Join(root, "srv/lib/capi-inplace"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o700)))
	_, err = os.Lstat("/srv/lib/capi-inplace")
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "nothing in the agent's own /srv/lib")

	// A user who owns /opt/u can point /opt/u/state anywhere.
	g.Expect(os.MkdirAll(filepath.Join(root, "opt/u"), 0o755)).To(Succeed())
	g.Expect(os.Chown(filepath.Join(root, "opt/u"), 1000, 1000)).To(Succeed())
	g.Expect(os.Symlink("/root", filepath.Join(root, "opt/u/state"))).To(Succeed())
	_, _, err = h.PinDir("/opt/u/state/capi-inplace", 0o700)
	g.Expect(err).To(MatchError(ErrSymlinkRefused))
	_, err = os.Lstat(filepath.Join(root, "root/capi-inplace"))
	g.Expect(os.IsNotExist(err)).To(BeTrue())
}
