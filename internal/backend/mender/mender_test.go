package mender

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func testdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
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
			backendtest.NeedTools(t, "mender-artifact", "openssl")
			keys := makeKeys(t)
			o := Options{}
			if tt.opts != nil {
				o = tt.opts(keys)
			}
			d := newDevice(t)
			b := d.backend(t, o)
			a := tt.mutate(t, d.dir, artifact(t, d.dir, "release-2", ""))
			envBefore := d.env(t)
			g.Expect(b.Stage(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(b.Activate(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(d.slotB(t)).To(Equal(make([]byte, slotSize)), "the inactive partition is untouched")
			g.Expect(d.env(t)).To(Equal(envBefore), "the bootloader environment is untouched")
		})
	}
	t.Run("signed artifact with the right key is accepted", func(t *testing.T) {
		g := NewWithT(t)
		backendtest.NeedTools(t, "mender-artifact", "openssl")
		keys := makeKeys(t)
		d := newDevice(t)
		b := d.backend(t, Options{VerifyKey: filepath.Join(keys, "public.pem")})
		a := artifact(t, d.dir, "release-2", filepath.Join(keys, "private.pem"))
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
	g.Expect(trialBooted(map[string]string{"mender_boot_part": "3", "upgrade_available": "1"}, "/dev/mmcblk0p3")).To(Succeed())
	g.Expect(trialBooted(map[string]string{"mender_boot_part": "3", "upgrade_available": "1"}, "/dev/mmcblk0p2")).To(MatchError(ContainSubstring("not rebooted")))
	g.Expect(trialBooted(map[string]string{"mender_boot_part": "2", "upgrade_available": "0"}, "/dev/mmcblk0p2")).To(MatchError(ContainSubstring("fell back")))
	commitNothing := testdata(t, "commit-nothing.stderr")
	g.Expect(commitNothing).To(ContainSubstring("There is nothing to commit"))
	g.Expect(nothingInProgress(&backend.CommandError{Result: backend.Result{ExitCode: 2, Stderr: []byte(commitNothing)}, Err: errors.New("exit status 2")})).To(BeTrue())
	g.Expect(nothingInProgress(&backend.CommandError{Result: backend.Result{ExitCode: 1}, Err: errors.New("exit status 1")})).To(BeFalse())
}
