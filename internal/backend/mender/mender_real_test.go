package mender

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

const slotSize = 64 * 1024

// device is a throwaway Mender A/B device driven by the real mender client:
// two image files on loop devices as RootfsPartA/B (reached through symlinks
// named part2/part3, the partition numbers mender_boot_part holds), a U-Boot
// environment in a file edited by the real fw_setenv, and three harness
// wrappers on PATH that stand in for what only a real board has: `mount`
// reports the simulated root partition, fw_printenv/fw_setenv use the file
// environment, and `mender` runs in a private mount namespace where
// /etc/mender holds the device's artifact_info.
type device struct {
	dir, bin string
}

func newDevice(t *testing.T) *device {
	t.Helper()
	backendtest.NeedTools(t, "mender", "mender-artifact", "fw_setenv", "losetup", "unshare", "openssl")
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("the mender client writes block devices: needs root for loop devices")
	}
	d := &device{dir: t.TempDir()}
	d.bin = filepath.Join(d.dir, "bin")
	for _, sub := range []string{"bin", "data", "etc-mender"} {
		if err := os.Mkdir(filepath.Join(d.dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, slot := range []string{"slotA.img", "slotB.img"} {
		img := filepath.Join(d.dir, slot)
		write(t, img, make([]byte, slotSize))
		out, err := exec.Command("losetup", "-f", "--show", img).Output()
		if err != nil {
			t.Fatalf("losetup %s: %v", img, err)
		}
		loop := strings.TrimSpace(string(out))
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })
		if err := os.Symlink(loop, filepath.Join(d.dir, []string{"part2", "part3"}[i])); err != nil {
			t.Fatal(err)
		}
	}
	envFile, envCfg := filepath.Join(d.dir, "uboot.env"), filepath.Join(d.dir, "fw_env.config")
	write(t, envFile, make([]byte, 0x4000))
	write(t, envCfg, []byte(envFile+" 0x0 0x4000\n"))
	write(t, filepath.Join(d.dir, "default.env"), []byte("mender_boot_part=2\nmender_boot_part_hex=2\nupgrade_available=0\nbootcount=0\n"))
	if out, err := exec.Command("fw_setenv", "-c", envCfg, "-f", filepath.Join(d.dir, "default.env"), "bootcount", "0").CombinedOutput(); err != nil {
		t.Fatalf("fw_setenv: %v\n%s", err, out)
	}
	write(t, filepath.Join(d.dir, "root"), []byte(filepath.Join(d.dir, "part2")))
	write(t, filepath.Join(d.dir, "etc-mender", "artifact_info"), []byte("artifact_name=release-1\n"))
	write(t, filepath.Join(d.dir, "data", "device_type"), []byte("device_type=test-device\n"))
	write(t, filepath.Join(d.dir, "mender.conf"), []byte(`{"RootfsPartA": "`+filepath.Join(d.dir, "part2")+
		`", "RootfsPartB": "`+filepath.Join(d.dir, "part3")+`", "ServerURL": "https://localhost"}`))
	script := func(name, body string) {
		if err := os.WriteFile(filepath.Join(d.bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script("fw_printenv", "exec /usr/bin/fw_printenv -c "+envCfg+` "$@"`)
	script("fw_setenv", "exec /usr/bin/fw_setenv -c "+envCfg+` "$@"`)
	script("mount", `[ $# -eq 0 ] && { echo "$(cat `+filepath.Join(d.dir, "root")+`) on / type ext4 (rw,relatime)"; exit 0; }; exec /bin/mount "$@"`)
	mender, err := exec.LookPath("mender")
	if err != nil {
		t.Fatal(err)
	}
	script("mender", `exec unshare -m sh -c 'mount --bind `+filepath.Join(d.dir, "etc-mender")+` /etc/mender && exec "$@"' sh `+mender+` "$@"`)
	// The wrappers must win the lookup of the agent process itself (os/exec
	// resolves names with the caller's PATH), not only of the commands' children.
	t.Setenv("PATH", d.bin+":"+os.Getenv("PATH"))
	return d
}

func (d *device) backend(t *testing.T, o Options) *Backend {
	t.Helper()
	o.Runner = backend.ExecRunner{}
	o.Config, o.DataDir, o.StateDir = filepath.Join(d.dir, "mender.conf"), filepath.Join(d.dir, "data"), filepath.Join(d.dir, "state")
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (d *device) env(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command(filepath.Join(d.bin, "fw_printenv")).Output()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func (d *device) setenv(t *testing.T, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if out, err := exec.Command(filepath.Join(d.bin, "fw_setenv"), kv[i], kv[i+1]).CombinedOutput(); err != nil {
			t.Fatalf("fw_setenv: %v\n%s", err, out)
		}
	}
}

func (d *device) slotB(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.dir, "slotB.img"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// boot does what Mender's U-Boot integration does: boot mender_boot_part.
func (d *device) boot(t *testing.T) {
	t.Helper()
	write(t, filepath.Join(d.dir, "root"), []byte(filepath.Join(d.dir, "part"+d.env(t)["mender_boot_part"])))
}

// bootFallback is U-Boot's altbootcmd after the trial boot failed: switch
// back, end the trial, boot the old partition.
func (d *device) bootFallback(t *testing.T) {
	t.Helper()
	d.setenv(t, "mender_boot_part", "2", "mender_boot_part_hex", "2", "upgrade_available", "0")
	d.boot(t)
}

func TestRealMenderStageActivateVerifyCommit(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	d := newDevice(t)
	b := d.backend(t, Options{})
	a := artifact(t, d.dir, "release-2", "")
	img := bytes.Repeat([]byte("release-2"), 4096)

	for range 2 {
		g.Expect(b.Stage(ctx, a)).To(Succeed())
	}
	g.Expect(d.slotB(t)).To(Equal(make([]byte, slotSize)), "stage only verifies")
	g.Expect(b.Activate(ctx, a)).To(Succeed())
	g.Expect(d.slotB(t)[:len(img)]).To(Equal(img), "mender wrote the inactive partition")
	g.Expect(d.env(t)).To(SatisfyAll(HaveKeyWithValue("mender_boot_part", "3"), HaveKeyWithValue("upgrade_available", "1")))
	g.Expect(b.Verify(ctx, a)).To(MatchError(ContainSubstring("not rebooted")))

	d.boot(t)
	g.Expect(b.Verify(ctx, a)).To(Succeed())
	g.Expect(b.Activate(ctx, a)).To(Succeed(), "repeated after the reboot: already installed")
	slotA, err := os.ReadFile(filepath.Join(d.dir, "slotA.img"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(slotA).To(Equal(make([]byte, slotSize)), "the repeat must not install over the previous partition")
	for range 2 {
		g.Expect(b.Commit(ctx, a)).To(Succeed())
	}
	g.Expect(d.env(t)).To(HaveKeyWithValue("upgrade_available", "0"))
	st, err := b.Status(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Booted).To(Equal("release-2"))
	g.Expect(b.Verify(ctx, a)).To(Succeed())
}

func TestRealMenderFailedVerifyRollsBack(t *testing.T) {
	t.Run("new partition did not boot", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t)
		b := d.backend(t, Options{})
		a := artifact(t, d.dir, "release-2", "")
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.bootFallback(t)
		g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
		g.Expect(b.Commit(ctx, a)).To(MatchError(backend.ErrVerifyFailed), "never commit the old image")
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		g.Expect(d.env(t)).To(SatisfyAll(HaveKeyWithValue("mender_boot_part", "2"), HaveKeyWithValue("upgrade_available", "0")))
		st, err := b.Status(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(st.Booted).To(Equal("release-1"))
	})
	t.Run("new partition booted but the gates failed", func(t *testing.T) {
		g := NewWithT(t)
		ctx := context.Background()
		d := newDevice(t)
		b := d.backend(t, Options{})
		a := artifact(t, d.dir, "release-2", "")
		g.Expect(b.Stage(ctx, a)).To(Succeed())
		g.Expect(b.Activate(ctx, a)).To(Succeed())
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(Succeed())
		for range 2 {
			g.Expect(b.Rollback(ctx, a)).To(Succeed())
		}
		g.Expect(d.env(t)).To(HaveKeyWithValue("mender_boot_part", "2"))
		d.boot(t)
		g.Expect(b.Verify(ctx, a)).To(MatchError(backend.ErrVerifyFailed))
	})
}
