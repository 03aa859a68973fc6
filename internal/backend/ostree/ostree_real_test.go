package ostree

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// world is a throwaway OSTree world: a source repository with two commits of a
// tiny OS and a sysroot that has the first one deployed.
type world struct {
	src, sysroot string
	v1, v2       string // commit checksums
}

func newWorld(t *testing.T) world {
	t.Helper()
	backendtest.NeedTools(t, "ostree")
	dir := t.TempDir()
	w := world{src: filepath.Join(dir, "src"), sysroot: filepath.Join(dir, "sysroot")}
	// ostree marks deployment roots immutable; undo it so that TempDir can clean up.
	t.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join(w.sysroot, "ostree", "deploy", "*", "deploy", "*"))
		for _, d := range dirs {
			_ = exec.Command("chattr", "-i", d).Run()
		}
	})
	run(t, "ostree", "init", "--repo="+w.src, "--mode=archive")
	w.v1 = commit(t, dir, w.src, "1")
	w.v2 = commit(t, dir, w.src, "2")
	if err := os.Mkdir(w.sysroot, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "ostree", "admin", "init-fs", "--modern", w.sysroot)
	run(t, "ostree", "admin", "os-init", "--sysroot="+w.sysroot, "testos")
	run(t, "ostree", "--repo="+filepath.Join(w.sysroot, "ostree/repo"), "pull-local", w.src, w.v1)
	run(t, "ostree", "admin", "deploy", "--sysroot="+w.sysroot, "--os=testos", w.v1)
	return w
}

// commit makes a minimal bootable tree: a kernel, an initramfs and os-release
// are what `ostree admin deploy` needs.
func commit(t *testing.T, dir, repo, version string) string {
	t.Helper()
	tree := filepath.Join(dir, "tree-"+version)
	files := map[string]string{
		"usr/lib/modules/6.1.0/vmlinuz":       "kernel " + version,
		"usr/lib/modules/6.1.0/initramfs.img": "initramfs",
		"usr/lib/os-release":                  "ID=testos\nVERSION_ID=" + version + "\n",
		"usr/etc/hostname":                    "node\n",
	}
	for p, c := range files {
		full := filepath.Join(tree, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return run(t, "ostree", "commit", "--repo="+repo, "--branch=testos/stable", "--tree=dir="+tree, "--subject=v"+version)
}

func (w world) deployments(t *testing.T) []Deployment {
	t.Helper()
	ds, err := parseAdminStatus(run(t, "ostree", "admin", "status", "--sysroot="+w.sysroot))
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func (w world) checksums(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, d := range w.deployments(t) {
		out = append(out, d.Checksum)
	}
	return out
}

func (w world) stagingRef(t *testing.T) string {
	t.Helper()
	out, _ := exec.Command("ostree", "--repo="+filepath.Join(w.sysroot, "ostree/repo"), "rev-parse", StagingRef).Output()
	return strings.TrimSpace(string(out))
}

func (w world) backend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Options{Runner: backend.ExecRunner{}, Sysroot: w.sysroot, OSName: "testos"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (w world) artifact(csum string) backend.Artifact {
	return backend.Artifact{Ref: w.src + ":testos/stable", Digest: "sha256:" + csum}
}

// remoteWorld is a world whose source repository is served over HTTP on
// loopback and configured as the sysroot's remote "lane", as nodes pull images.
type remoteWorld struct{ world }

func (w world) httpRemote(t *testing.T) remoteWorld {
	t.Helper()
	srv := httptest.NewServer(http.FileServer(http.Dir(w.src)))
	t.Cleanup(srv.Close)
	run(t, "ostree", "--repo="+filepath.Join(w.sysroot, "ostree/repo"), "remote", "add", "--no-gpg-verify", "lane", srv.URL)
	return remoteWorld{w}
}

func (w remoteWorld) artifact(csum string) backend.Artifact {
	return backend.Artifact{Ref: "lane:testos/stable", Digest: "sha256:" + csum}
}

func TestRealOSTreeStageActivateCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t)
	b := w.backend(t)
	a := w.artifact(w.v2)

	for range 2 {
		g.Expect(b.Stage(ctx, a)).To(Succeed())
	}
	g.Expect(w.checksums(t)).To(Equal([]string{w.v1}), "stage must not touch the deployments")
	g.Expect(w.stagingRef(t)).To(Equal(w.v2))

	for range 2 {
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	g.Expect(w.checksums(t)).To(Equal([]string{w.v2, w.v1}), "v2 boots next, v1 stays for rollback")
	entries, err := filepath.Glob(filepath.Join(w.sysroot, "boot/loader/entries/*.conf"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(entries).To(HaveLen(2))

	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Staged: w.v2, Rollback: w.v1}))

	for range 2 {
		g.Expect(b.Commit(ctx, a)).To(Succeed())
	}
	g.Expect(w.stagingRef(t)).To(BeEmpty())
	g.Expect(w.checksums(t)).To(Equal([]string{w.v2, w.v1}))
}

// A sysroot that is not booted has no booted deployment: Verify must fail (the
// node did not come up on the artifact) and Rollback must restore the old order.
func TestRealOSTreeFailedVerifyRollsBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t)
	b := w.backend(t)
	a := w.artifact(w.v2)
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())

	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))

	for range 2 {
		g.Expect(b.Rollback(ctx, a)).To(Succeed())
	}
	g.Expect(w.checksums(t)).To(Equal([]string{w.v1}))
	g.Expect(w.stagingRef(t)).To(BeEmpty())
	// Rolling back the artifact again, or one that was never staged, changes nothing.
	g.Expect(b.Rollback(ctx, w.artifact(strings.Repeat("e", 64)))).To(Succeed())
	g.Expect(w.checksums(t)).To(Equal([]string{w.v1}))
}

func TestRealOSTreeRefusesBadArtifactBeforeChanging(t *testing.T) {
	tests := []struct {
		name     string
		artifact func(t *testing.T, w world) backend.Artifact
	}{
		{name: "digest is not a commit in the source", artifact: func(_ *testing.T, w world) backend.Artifact {
			return w.artifact(strings.Repeat("0", 64))
		}},
		{name: "source objects are corrupt", artifact: func(t *testing.T, w world) backend.Artifact {
			files, err := filepath.Glob(filepath.Join(w.src, "objects", "*", "*.filez"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no file objects in %s: %v", w.src, err)
			}
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				copy(data[len(data)/2:], "garbage!")
				_ = os.Chmod(f, 0o644)
				if err := os.WriteFile(f, data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return w.artifact(w.v2)
		}},
		{name: "malformed digest", artifact: func(_ *testing.T, w world) backend.Artifact {
			return backend.Artifact{Ref: w.src + ":testos/stable", Digest: w.v2}
		}},
		{name: "digest is not a commit on an HTTP remote (404)", artifact: func(t *testing.T, w world) backend.Artifact {
			return w.httpRemote(t).artifact(strings.Repeat("0", 64))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			w := newWorld(t)
			b := w.backend(t)
			a := tt.artifact(t, w)
			g.Expect(b.Stage(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(w.checksums(t)).To(Equal([]string{w.v1}))
			g.Expect(w.stagingRef(t)).To(BeEmpty())
		})
	}
}
