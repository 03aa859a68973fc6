package swupdate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
	return string(out)
}

func write(t *testing.T, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newc writes a cpio archive in the "newc" format SWUpdate reads, files in order
// (sw-description must come first).
func newc(files [][2]string) []byte {
	var buf bytes.Buffer
	entry := func(name string, data []byte, mode int) {
		fmt.Fprintf(&buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			0, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		buf.WriteString(name + "\x00")
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
		buf.Write(data)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
	}
	for _, f := range files {
		entry(f[0], []byte(f[1]), 0o100644)
	}
	entry("TRAILER!!!", nil, 0)
	return buf.Bytes()
}

// device is a throwaway A/B system: two image files as slots, a U-Boot
// environment in a file edited by the real fw_setenv, a kernel command line
// file, and a signing certificate made here.
type device struct {
	dir, cert, key, envCfg, cmdline string
	slots                           []Slot
}

func newDevice(t *testing.T) *device {
	t.Helper()
	backendtest.NeedTools(t, "swupdate", "fw_setenv", "fw_printenv", "openssl")
	dir := t.TempDir()
	d := &device{dir: dir, cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"),
		envCfg: filepath.Join(dir, "fw_env.config"), cmdline: filepath.Join(dir, "cmdline")}
	// SWUpdate verifies sw-description with CMS and expects an emailProtection signer.
	run(t, "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d.key, "-out", d.cert, "-days", "2",
		"-subj", "/CN=capi-inplace test", "-addext", "extendedKeyUsage=emailProtection", "-addext", "keyUsage=digitalSignature")
	d.slots = []Slot{
		{Name: "A", Device: filepath.Join(dir, "slotA.img"), Selection: "stable,copy1"},
		{Name: "B", Device: filepath.Join(dir, "slotB.img"), Selection: "stable,copy2"},
	}
	write(t, d.slots[0].Device, []byte("old image"))
	write(t, d.slots[1].Device, nil)
	envFile := filepath.Join(dir, "uboot.env")
	write(t, envFile, make([]byte, 0x4000))
	write(t, d.envCfg, []byte(envFile+" 0x0 0x4000\n"))
	write(t, filepath.Join(dir, "default.env"), []byte("boot_slot=A\nupgrade_available=0\nbootcount=0\n"))
	run(t, "fw_setenv", "-c", d.envCfg, "-f", filepath.Join(dir, "default.env"), "boot_slot", "A")
	write(t, d.cmdline, []byte("console=ttyS0 root="+d.slots[0].Device+" rw\n"))
	return d
}

func (d *device) env(t *testing.T) map[string]string {
	t.Helper()
	return parseEnv(run(t, "fw_printenv", "-c", d.envCfg))
}

// boot does what U-Boot does: boot the slot the environment selects.
func (d *device) boot(t *testing.T) {
	t.Helper()
	slot := d.env(t)["boot_slot"]
	for _, s := range d.slots {
		if s.Name == slot {
			write(t, d.cmdline, []byte("console=ttyS0 root="+s.Device+" rw\n"))
			return
		}
	}
	t.Fatalf("boot_slot=%q is no slot", slot)
}

// bootFallback is U-Boot's altbootcmd after the new slot failed to come up.
func (d *device) bootFallback(t *testing.T) {
	t.Helper()
	write(t, d.cmdline, []byte("console=ttyS0 root="+d.slots[0].Device+" rw\n"))
}

// swu builds a signed .swu whose two software sets write the image to slot A or B.
func (d *device) swu(t *testing.T) (backend.Artifact, []byte) {
	t.Helper()
	img := make([]byte, 32*1024)
	_, _ = rand.Read(img)
	sum := sha256.Sum256(img)
	desc := fmt.Sprintf(`software =
{
	version = "2.0.0";
	hardware-compatibility: [ "1.0" ];
	stable = {
		copy1 = { images: ( { filename = "rootfs.img"; device = "%s"; type = "raw"; sha256 = "%s"; } ); };
		copy2 = { images: ( { filename = "rootfs.img"; device = "%s"; type = "raw"; sha256 = "%s"; } ); };
	};
}
`, d.slots[0].Device, hex.EncodeToString(sum[:]), d.slots[1].Device, hex.EncodeToString(sum[:]))
	descPath := filepath.Join(d.dir, "sw-description")
	write(t, descPath, []byte(desc))
	run(t, "openssl", "cms", "-sign", "-in", descPath, "-out", descPath+".sig", "-signer", d.cert, "-inkey", d.key,
		"-outform", "DER", "-nosmimecap", "-binary")
	swu := filepath.Join(d.dir, "update.swu")
	write(t, swu, newc([][2]string{{"sw-description", desc}, {"sw-description.sig", string(read(t, descPath+".sig"))}, {"rootfs.img", string(img)}}))
	digest, err := backend.FileDigest(swu)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Artifact{Ref: swu, Digest: digest}, img
}

func (d *device) backend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Options{Runner: backend.ExecRunner{}, Slots: d.slots, StateDir: filepath.Join(d.dir, "state"),
		CmdlinePath: d.cmdline, EnvConfig: d.envCfg, PublicKey: d.cert, HWRevision: "board:1.0"})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRealSWUpdateStageActivateVerifyCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := newDevice(t)
	b := d.backend(t)
	a, img := d.swu(t)

	for range 2 {
		g.Expect(b.Stage(ctx, a)).To(Succeed())
	}
	g.Expect(read(t, d.slots[1].Device)).To(Equal(img), "SWUpdate wrote the inactive slot")
	g.Expect(read(t, d.slots[0].Device)).To(Equal([]byte("old image")))
	g.Expect(d.env(t)).To(HaveKeyWithValue("boot_slot", "A"), "stage must not change the next boot")

	for range 2 {
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	g.Expect(d.env(t)).To(SatisfyAll(HaveKeyWithValue("boot_slot", "B"), HaveKeyWithValue("upgrade_available", "1")))
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))

	d.boot(t)
	g.Expect(b.Verify(ctx, a)).To(Succeed())
	for range 2 {
		g.Expect(b.Commit(ctx, a)).To(Succeed())
	}
	g.Expect(d.env(t)).To(SatisfyAll(HaveKeyWithValue("boot_slot", "B"), HaveKeyWithValue("upgrade_available", "0")))
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st).To(Equal(backend.Status{Booted: "B@" + a.Digest, Rollback: "A"}))
}

func TestRealSWUpdateFailedVerifyRollsBack(t *testing.T) {
	t.Run("new slot did not boot", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t)
		b := d.backend(t)
		a, _ := d.swu(t)
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.bootFallback(t)
		g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
		g.Expect(b.Commit(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		g.Expect(d.env(t)).To(SatisfyAll(HaveKeyWithValue("boot_slot", "A"), HaveKeyWithValue("upgrade_available", "0")))
	})
	t.Run("new slot booted but the gates failed", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t)
		b := d.backend(t)
		a, _ := d.swu(t)
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(Succeed())
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
		g.Expect(read(t, d.slots[0].Device)).To(Equal([]byte("old image")))
	})
}

func TestRealSWUpdateRefusesBadImageBeforeChanging(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, a backend.Artifact) backend.Artifact
	}{
		{name: "wrong digest", mutate: func(_ *testing.T, a backend.Artifact) backend.Artifact {
			a.Digest = "sha256:" + strings.Repeat("2", 64)
			return a
		}},
		{name: "corrupt image with its own digest (swupdate check fails)", mutate: func(t *testing.T, a backend.Artifact) backend.Artifact {
			data := read(t, a.Ref)
			data[len(data)-2000] ^= 0xff
			write(t, a.Ref, data)
			digest, err := backend.FileDigest(a.Ref)
			if err != nil {
				t.Fatal(err)
			}
			a.Digest = digest
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDevice(t)
			b := d.backend(t)
			a, _ := d.swu(t)
			envBefore := d.env(t)
			g.Expect(b.Stage(context.Background(), tt.mutate(t, a))).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(read(t, d.slots[1].Device)).To(BeEmpty(), "the inactive slot is untouched")
			g.Expect(d.env(t)).To(Equal(envBefore))
		})
	}
}
