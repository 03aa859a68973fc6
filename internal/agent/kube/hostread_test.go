package kube

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// TestReadFileStaysInTheHostRoot: a configuration file read under a symlink
// that points out of the host root (an absolute link, as the host would follow
// it, or one climbing with ..) is read where the host sees it, inside the root,
// never from the agent's container; a symlink as the file itself is refused.
// Before, the node and OS backend configurations were read by a plain join and
// followed the link out of the root.
func TestReadFileStaysInTheHostRoot(t *testing.T) {
	g := NewWithT(t)
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "node.json"), []byte("outside"), 0o644)).To(Succeed())
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "etc"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(root, "etc/capi-inplace"))).To(Succeed())
	g.Expect(os.Symlink("../../../../../../../../.."+outside, filepath.Join(root, "etc/climbing"))).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, "node.json"), filepath.Join(root, "etc/node.json"))).To(Succeed())
	h := &Host{Root: root}

	_, err := h.ReadFile("/etc/capi-inplace/node.json")
	g.Expect(err).To(MatchError(os.ErrNotExist), "the host has no %s", outside)
	_, err = h.ReadFile("/etc/climbing/node.json")
	g.Expect(err).To(MatchError(os.ErrNotExist))
	_, err = h.ReadFile("/etc/node.json")
	g.Expect(err).To(MatchError(ErrSymlinkRefused))

	// The host's own copy at the link's target is what is read.
	g.Expect(os.MkdirAll(filepath.Join(root, outside), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, outside, "node.json"), []byte("host"), 0o644)).To(Succeed())
	for _, p := range []string{"/etc/capi-inplace/node.json", "/etc/climbing/node.json"} {
		got, err := h.ReadFile(p)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal("host"), p)
	}
}

// TestHostFileExistsStaysInTheHostRoot: an existence check follows symlinks as
// every host path does: inside the root (a link out of it finds nothing there),
// relative links from the directory they really are in (lib -> usr/lib), and
// none in a directory another user owns.
func TestHostFileExistsStaysInTheHostRoot(t *testing.T) {
	g := NewWithT(t)
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "systemd-timesyncd"), nil, 0o755)).To(Succeed())
	root := t.TempDir()
	for _, d := range []string{"usr/lib/systemd", "usr/libexec", "home/user"} {
		g.Expect(os.MkdirAll(filepath.Join(root, d), 0o755)).To(Succeed())
	}
	g.Expect(os.Symlink("usr/lib", filepath.Join(root, "lib"))).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "usr/lib/systemd/systemd-timesyncd"), nil, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, "usr/libexec/timesyncd"), nil, 0o755)).To(Succeed())
	g.Expect(os.Symlink(filepath.Join(outside, "systemd-timesyncd"), filepath.Join(root, "usr/lib/systemd/absolute-out"))).To(Succeed())
	g.Expect(os.Symlink("../../../../../../../.."+outside+"/systemd-timesyncd", filepath.Join(root, "usr/lib/systemd/climbing-out"))).To(Succeed())
	g.Expect(os.Symlink("../../libexec/timesyncd", filepath.Join(root, "usr/lib/systemd/relative"))).To(Succeed())
	g.Expect(os.Symlink("missing", filepath.Join(root, "usr/lib/systemd/dangling"))).To(Succeed())
	g.Expect(os.Symlink("loop", filepath.Join(root, "usr/lib/systemd/loop"))).To(Succeed())
	h := &Host{Root: root}

	for p, want := range map[string]bool{
		"/lib/systemd/systemd-timesyncd":     true,
		"/usr/lib/systemd/systemd-timesyncd": true,
		"/lib/systemd/relative":              true, // ../../libexec from /usr/lib/systemd, not from /lib/systemd
		"/lib/systemd/absolute-out":          false,
		"/lib/systemd/climbing-out":          false,
		"/lib/systemd/dangling":              false,
		"/lib/systemd/loop":                  false,
		"/lib/systemd/nothing":               false,
	} {
		g.Expect(h.hostFileExists(p)).To(Equal(want), p)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the symlink in another user's directory is not checked")
		return
	}
	home := filepath.Join(root, "home/user")
	g.Expect(os.Symlink("/usr/lib/systemd/systemd-timesyncd", filepath.Join(home, "timesyncd"))).To(Succeed())
	g.Expect(os.Chown(home, 1000, 1000)).To(Succeed())
	g.Expect(h.hostFileExists("/home/user/timesyncd")).To(BeFalse(), "a user's symlink is not followed")
}
