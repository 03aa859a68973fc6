package rauc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
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

// bootScript is RAUC's "custom" bootloader backend, keeping the bootloader's
// state in files: what a U-Boot/GRUB environment would hold. Making a slot
// primary also makes it good to try, as RAUC's GRUB and U-Boot backends do
// (GRUB: <slot>_OK=1, <slot>_TRY=0; measured on the OS image lane's VM).
const bootScript = `#!/bin/sh
d=$(dirname "$0")
echo "$*" >> "$d/boot.log"
case "$1" in
get-primary) cat "$d/primary" ;;
set-primary) echo "$2" > "$d/primary"; rm -f "$d/state.$2" ;;
get-state) cat "$d/state.$2" 2>/dev/null || echo good ;;
set-state) echo "$3" > "$d/state.$2" ;;
get-current) cat "$d/current" ;;
*) exit 1 ;;
esac
`

const busConf = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=@SOCK@</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// device is a throwaway RAUC system: two image files as A/B slots, a custom
// bootloader, signing keys made here, and a RAUC service on a private bus.
type device struct {
	dir, conf, cert string
	slotA, slotB    string
	env             []string
	service         *exec.Cmd
	exited          <-chan struct{} // closed once service has been waited for
}

func newDevice(t *testing.T, activateInstalled bool) *device {
	t.Helper()
	backendtest.NeedTools(t, "rauc", "openssl", "dbus-daemon", "mksquashfs")
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("rauc install mounts the bundle: needs root")
	}
	dir := t.TempDir()
	d := &device{dir: dir, conf: filepath.Join(dir, "system.conf"), cert: filepath.Join(dir, "cert.pem"),
		slotA: filepath.Join(dir, "slotA.img"), slotB: filepath.Join(dir, "slotB.img")}
	run(t, "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", filepath.Join(dir, "key.pem"),
		"-out", d.cert, "-days", "2", "-subj", "/CN=capi-inplace test")
	write(t, filepath.Join(dir, "boot.sh"), bootScript, 0o755)
	write(t, filepath.Join(dir, "primary"), "A\n", 0o644)
	write(t, filepath.Join(dir, "current"), "A\n", 0o644)
	write(t, d.slotA, "old image", 0o644)
	write(t, d.slotB, "", 0o644)
	conf := fmt.Sprintf(`[system]
compatible=capi-inplace-test
bootloader=custom
data-directory=%[1]s/data
activate-installed=%[2]t

[handlers]
bootloader-custom-backend=%[1]s/boot.sh

[keyring]
path=%[3]s

[slot.rootfs.0]
device=%[4]s
type=raw
bootname=A

[slot.rootfs.1]
device=%[5]s
type=raw
bootname=B
`, dir, activateInstalled, d.cert, d.slotA, d.slotB)
	write(t, d.conf, conf, 0o644)

	sock := filepath.Join(dir, "bus.sock")
	write(t, filepath.Join(dir, "bus.conf"), strings.ReplaceAll(busConf, "@SOCK@", sock), 0o644)
	// dbus-daemon prints its address once it listens; a RAUC service started
	// before that cannot reach the bus and exits.
	bus := exec.Command("dbus-daemon", "--nofork", "--print-address=1", "--config-file="+filepath.Join(dir, "bus.conf"))
	listening, err := bus.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Process.Kill(); _ = bus.Wait() })
	if _, err := bufio.NewReader(listening).ReadString('\n'); err != nil {
		t.Fatalf("dbus-daemon did not start listening: %v", err)
	}
	d.env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS=unix:path="+sock)
	d.boot(t)
	return d
}

// boot (re)starts the RAUC service as if the device had booted what the
// bootloader says is primary.
func (d *device) boot(t *testing.T) {
	t.Helper()
	d.stop()
	booted := strings.TrimSpace(string(read(t, filepath.Join(d.dir, "primary"))))
	write(t, filepath.Join(d.dir, "current"), booted+"\n", 0o644)
	d.serve(t, booted)
}

// bootFallback is a boot where the new slot did not come up and the bootloader
// fell back to the slot that ran before.
func (d *device) bootFallback(t *testing.T, slot string) {
	t.Helper()
	d.stop()
	d.serve(t, slot)
}

func (d *device) serve(t *testing.T, bootname string) {
	t.Helper()
	var log bytes.Buffer
	svc := exec.Command("rauc", "--conf="+d.conf, "service", "--override-boot-slot="+bootname)
	svc.Env, svc.Stdout, svc.Stderr = d.env, &log, &log
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	d.service = svc
	t.Cleanup(d.stop)
	exited := make(chan struct{})
	go func() { _ = svc.Wait(); close(exited) }()
	d.exited = exited
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := exec.Command("rauc", "--conf="+d.conf, "status", "--output-format=json")
		c.Env = d.env
		if c.Run() == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("rauc service exited: %s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			t.Fatalf("rauc service did not come up: %s", log.String())
		}
	}
}

func (d *device) stop() {
	if d.service != nil {
		_ = d.service.Process.Kill()
		<-d.exited
		d.service = nil
	}
}

// bundle builds a signed bundle holding a 64 KiB image.
func (d *device) bundle(t *testing.T, version string) (backend.Artifact, []byte) {
	t.Helper()
	content := filepath.Join(d.dir, "bundle-"+version)
	if err := os.Mkdir(content, 0o755); err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 64*1024)
	_, _ = rand.Read(img)
	write(t, filepath.Join(content, "rootfs.img"), string(img), 0o644)
	write(t, filepath.Join(content, "manifest.raucm"), "[update]\ncompatible=capi-inplace-test\nversion="+version+
		"\n\n[bundle]\nformat=plain\n\n[image.rootfs]\nfilename=rootfs.img\n", 0o644)
	out := filepath.Join(d.dir, "update-"+version+".raucb")
	run(t, "rauc", "bundle", "--cert="+d.cert, "--key="+filepath.Join(d.dir, "key.pem"), content, out)
	digest, err := backend.FileDigest(out)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Artifact{Ref: out, Digest: digest}, img
}

func (d *device) backend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Options{Runner: backend.ExecRunner{Env: d.env}, Conf: d.conf, StateDir: filepath.Join(d.dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (d *device) primary(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(string(read(t, filepath.Join(d.dir, "primary"))))
}

func (d *device) bootState(t *testing.T, bootname string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, "state."+bootname))
	if err != nil {
		return "good"
	}
	return strings.TrimSpace(string(b))
}

func TestRealRAUCStageActivateVerifyCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := newDevice(t, false)
	b := d.backend(t)
	g.Expect(b.Capabilities().CanStage).To(BeTrue())
	a, img := d.bundle(t, "2")

	for range 2 {
		g.Expect(b.Stage(ctx, a)).To(Succeed())
	}
	g.Expect(read(t, d.slotB)).To(Equal(img), "the inactive slot holds the image")
	g.Expect(read(t, d.slotA)).To(Equal([]byte("old image")))
	g.Expect(d.primary(t)).To(Equal("A"), "stage must not change the next boot")

	for range 2 {
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	g.Expect(d.primary(t)).To(Equal("B"))
	g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed), "still running A before the reboot")

	d.boot(t)
	g.Expect(b.Verify(ctx, a)).To(Succeed())
	write(t, filepath.Join(d.dir, "state.B"), "bad\n", 0o644) // boot counting in progress
	for range 2 {
		g.Expect(b.Commit(ctx, a)).To(Succeed())
	}
	g.Expect(d.bootState(t, "B")).To(Equal("good"))
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(HavePrefix("rootfs.1@sha256:"))
	g.Expect(st.Rollback).To(Equal("rootfs.0"))
}

func TestRealRAUCFailedVerifyRollsBack(t *testing.T) {
	t.Run("new slot did not boot", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t, false)
		b := d.backend(t)
		a, _ := d.bundle(t, "2")
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.bootFallback(t, "A")
		err := b.Verify(ctx, a)
		g.Expect(err).To(MatchError(backend.ErrVerifyFailed))
		// Slot A holds the image the node came with: RAUC has no checksum of it.
		g.Expect(err).To(MatchError(ContainSubstring("holds an image RAUC did not install")))
		g.Expect(b.Commit(ctx, a)).To(MatchError(backend.ErrVerifyFailed), "the old slot is never marked good for the new image")
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		g.Expect(d.primary(t)).To(Equal("A"))
		g.Expect(d.bootState(t, "B")).To(Equal("bad"), "the failed slot is never tried again")
	})
	t.Run("new slot booted but the gates failed", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t, false)
		b := d.backend(t)
		a, _ := d.bundle(t, "2")
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(Succeed())
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		g.Expect(d.primary(t)).To(Equal("A"))
		g.Expect(d.bootState(t, "B")).To(Equal("bad"), "the failed slot is never tried again")
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
		g.Expect(read(t, d.slotA)).To(Equal([]byte("old image")))
	})
}

func TestRealRAUCRefusesBadBundleBeforeChanging(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, a backend.Artifact) backend.Artifact
	}{
		{name: "wrong digest", mutate: func(_ *testing.T, a backend.Artifact) backend.Artifact {
			a.Digest = "sha256:" + strings.Repeat("1", 64)
			return a
		}},
		{name: "corrupt bundle with its own digest (signature check fails)", mutate: func(t *testing.T, a backend.Artifact) backend.Artifact {
			data := read(t, a.Ref)
			data[len(data)/3] ^= 0xff
			write(t, a.Ref, string(data), 0o644)
			digest, err := backend.FileDigest(a.Ref)
			if err != nil {
				t.Fatal(err)
			}
			a.Digest = digest
			return a
		}},
		{name: "missing bundle", mutate: func(_ *testing.T, a backend.Artifact) backend.Artifact {
			a.Ref += ".missing"
			return a
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDevice(t, false)
			b := d.backend(t)
			a, _ := d.bundle(t, "2")
			a = tt.mutate(t, a)
			g.Expect(b.Stage(context.Background(), a)).To(MatchError(backend.ErrArtifactRefused))
			g.Expect(read(t, d.slotB)).To(BeEmpty(), "the inactive slot is untouched")
			g.Expect(d.primary(t)).To(Equal("A"))
			log, _ := os.ReadFile(filepath.Join(d.dir, "boot.log"))
			g.Expect(string(log)).NotTo(ContainSubstring("set-"), "the bootloader is untouched")
		})
	}
}

// With RAUC's default activate-installed=true, installing switches the boot, so
// the backend reports it cannot stage and installs only in Activate.
func TestRealRAUCActivateInstalled(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := newDevice(t, true)
	b := d.backend(t)
	g.Expect(b.Capabilities().CanStage).To(BeFalse())
	a, img := d.bundle(t, "2")
	g.Expect(b.Stage(ctx, a)).To(Succeed())
	g.Expect(read(t, d.slotB)).To(BeEmpty())
	for range 2 {
		g.Expect(b.Activate(ctx, a)).To(Succeed())
	}
	g.Expect(read(t, d.slotB)).To(Equal(img))
	g.Expect(d.primary(t)).To(Equal("B"))
}
