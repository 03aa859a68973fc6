package mender

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

func needTool(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("%s not installed (run hack/install-deps.sh)", name)
			}
			t.Fatalf("%s not installed in CI: hack/install-deps.sh must install it", name)
		}
	}
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// client models the Mender client's standalone state machine (install writes
// the inactive partition and arms the trial, commit ends it, rollback undoes
// it) and answers in the recorded output formats. mender-artifact is real.
type client struct {
	running, pending string // artifact names
	previous         string
	booted           bool // the pending artifact was booted (after reboot)
	calls            []string
	real             backend.Runner
	readNames        func(path string) string
}

func exitErr(c backend.Command, code int, stderr string) (backend.Result, error) {
	res := backend.Result{ExitCode: code, Stderr: []byte(stderr)}
	return res, &backend.CommandError{Command: c, Result: res, Err: fmt.Errorf("exit status %d", code)}
}

func (m *client) Run(ctx context.Context, c backend.Command) (backend.Result, error) {
	if c.Name != "mender" {
		return m.real.Run(ctx, c)
	}
	m.calls = append(m.calls, c.String())
	verb := c.Args[len(c.Args)-1]
	if len(c.Args) >= 2 && c.Args[len(c.Args)-2] == "install" {
		verb = "install"
	}
	switch verb {
	case "show-artifact":
		return backend.Result{Stdout: []byte(m.running + "\n")}, nil
	case "install":
		m.pending, m.booted = m.readNames(c.Args[len(c.Args)-1]), false
		return backend.Result{Stdout: []byte("Installing Artifact of size 71168...\nUse 'commit' to update, or 'rollback' to roll back the update.\nAt least one payload requested a reboot of the device it updated.\n")}, nil
	case "commit":
		if m.pending == "" || !m.booted {
			return exitErr(c, 2, recorded("commit-nothing.stderr"))
		}
		m.pending, m.booted = "", false
		return backend.Result{}, nil
	case "rollback":
		if m.pending == "" {
			return exitErr(c, 2, recorded("commit-nothing.stderr"))
		}
		if m.booted {
			m.running = m.previous
		}
		m.pending, m.booted = "", false
		return backend.Result{}, nil
	}
	return exitErr(c, 1, "unknown command")
}

// reboot boots the pending artifact, as U-Boot does with upgrade_available=1.
func (m *client) reboot() {
	if m.pending != "" && !m.booted {
		m.previous, m.running, m.booted = m.running, m.pending, true
	}
}

func recorded(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		return "missing testdata " + name
	}
	return string(b)
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// artifact builds a real rootfs-image Artifact with mender-artifact.
func artifact(t *testing.T, dir, name string, signKey string) backend.Artifact {
	t.Helper()
	img := filepath.Join(dir, name+".ext4")
	write(t, img, []byte(strings.Repeat(name, 4096)))
	out := filepath.Join(dir, name+".mender")
	args := []string{"write", "rootfs-image", "-t", "test-device", "-n", name, "-f", img, "-o", out}
	if signKey != "" {
		args = append(args, "-k", signKey)
	}
	if b, err := exec.Command("mender-artifact", args...).CombinedOutput(); err != nil {
		t.Fatalf("mender-artifact write: %v\n%s", err, b)
	}
	d, err := backend.FileDigest(out)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Artifact{Ref: out, Digest: d}
}

func setup(t *testing.T, o Options) (*client, *Backend, string) {
	t.Helper()
	needTool(t, "mender-artifact")
	dir := t.TempDir()
	m := &client{running: "release-1", real: backend.ExecRunner{}}
	m.readNames = func(p string) string { return strings.TrimSuffix(filepath.Base(p), ".mender") }
	o.Runner, o.StateDir = m, filepath.Join(dir, "state")
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return m, b, dir
}

func TestStageActivateVerifyCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, b, dir := setup(t, Options{})
	a := artifact(t, dir, "release-2", "")
	for range 2 {
		g.Expect(b.Stage(ctx, a)).To(Succeed())
	}
	g.Expect(m.calls).To(BeEmpty(), "stage does not touch the client")
	for range 2 {
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	g.Expect(m.pending).To(Equal("release-2"))
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
	m.reboot()
	g.Expect(b.Verify(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed(), "already running: no second install")
	for range 2 {
		g.Expect(b.Commit(ctx, a)).To(Succeed(), "exit 2 'nothing to commit' on the repeat is success")
	}
	g.Expect(m.pending).To(BeEmpty())
	g.Expect(strings.Join(m.calls, "\n")).To(ContainSubstring("mender --no-syslog install " + a.Ref))
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(Equal("release-2"))
}

func TestFailedVerifyRollsBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, b, dir := setup(t, Options{Config: "/etc/mender/mender.conf", DataDir: "/var/lib/mender"})
	a := artifact(t, dir, "release-2", "")
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed())
	m.reboot()
	m.running = "release-1" // the new partition did not come up: the bootloader fell back
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
	g.Expect(b.Commit(ctx, a)).To(MatchError(backend.ErrVerifyFailed), "never commit the wrong image")
	for range 2 {
		g.Expect(b.Rollback(ctx, a)).To(Succeed())
	}
	g.Expect(m.pending).To(BeEmpty())
	g.Expect(m.calls).To(ContainElement("mender --no-syslog --config /etc/mender/mender.conf --data /var/lib/mender rollback"))
}

func TestRealArtifactToolRefusesBeforeChanging(t *testing.T) {
	tests := []struct {
		name   string
		opts   func(dir string) Options
		mutate func(t *testing.T, dir string, a backend.Artifact) backend.Artifact
	}{
		{name: "wrong digest", mutate: func(_ *testing.T, _ string, a backend.Artifact) backend.Artifact {
			a.Digest = "sha256:" + strings.Repeat("3", 64)
			return a
		}},
		{name: "corrupt payload with its own digest", mutate: func(t *testing.T, _ string, a backend.Artifact) backend.Artifact {
			data, _ := os.ReadFile(a.Ref)
			data[len(data)/2] ^= 0xff
			write(t, a.Ref, data)
			a.Digest, _ = backend.FileDigest(a.Ref)
			return a
		}},
		{name: "unsigned artifact when a key is required", opts: func(dir string) Options {
			return Options{VerifyKey: filepath.Join(dir, "public.pem")}
		}, mutate: func(_ *testing.T, _ string, a backend.Artifact) backend.Artifact { return a }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			needTool(t, "mender-artifact", "openssl")
			keys := makeKeys(t)
			o := Options{}
			if tt.opts != nil {
				o = tt.opts(keys)
			}
			m, b, dir := setup(t, o)
			a := tt.mutate(t, dir, artifact(t, dir, "release-2", ""))
			g.Expect(b.Stage(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(b.Activate(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(m.calls).NotTo(ContainElement(ContainSubstring("install")), "nothing is installed")
			g.Expect(m.pending).To(BeEmpty())
		})
	}
	t.Run("signed artifact with the right key is accepted", func(t *testing.T) {
		g := NewWithT(t)
		needTool(t, "mender-artifact", "openssl")
		keys := makeKeys(t)
		_, b, dir := setup(t, Options{VerifyKey: filepath.Join(keys, "public.pem")})
		a := artifact(t, dir, "release-2", filepath.Join(keys, "private.pem"))
		g.Expect(b.Stage(context.Background(), a)).To(Succeed())
	})
}

// makeKeys makes an RSA key pair in the PKCS#1 form mender-artifact signs with.
func makeKeys(t *testing.T) string {
	t.Helper()
	keys := t.TempDir()
	for _, args := range [][]string{
		{"genrsa", "-traditional", "-out", filepath.Join(keys, "private.pem"), "2048"},
		{"rsa", "-in", filepath.Join(keys, "private.pem"), "-pubout", "-out", filepath.Join(keys, "public.pem")},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	return keys
}

func TestParseArtifactName(t *testing.T) {
	g := NewWithT(t)
	name, err := parseArtifactName(testdata(t, "artifact-read.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(name).To(Equal("release-2"))
	_, err = parseArtifactName("garbage")
	g.Expect(err).To(HaveOccurred())
	g.Expect(nothingInProgress(&backend.CommandError{Result: backend.Result{ExitCode: 2}, Err: errors.New("exit status 2")})).To(BeTrue())
	g.Expect(nothingInProgress(&backend.CommandError{Result: backend.Result{ExitCode: 1}, Err: errors.New("exit status 1")})).To(BeFalse())
}
