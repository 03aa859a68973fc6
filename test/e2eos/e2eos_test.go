//go:build e2eos

package e2eos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
	"github.com/capi-inplace/capi-inplace/test/e2eos/vmapi"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// bootTimeout bounds one boot under emulation; the figures say what they took.
const (
	bootTimeout  = 6 * time.Minute
	artifactsDir = "../../_artifacts/osimage"
)

var (
	imageDir string
	server   *lanekit.ArtifactServer
	figures  = &lanekit.Figures{Title: "OS image lane: RAUC A/B slots and OSTree deployments, GRUB boot counting, QEMU TCG"}
)

func TestMain(m *testing.M) {
	imageDir = os.Getenv("E2EOS_IMAGE")
	if imageDir == "" {
		fmt.Fprintln(os.Stderr, "E2EOS_IMAGE is not set: run `make e2e-os` (it builds the images with hack/osimage/build.sh)")
		os.Exit(1)
	}
	if err := serveBundles(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildFigures()
	code := m.Run()
	server.Close()
	if err := stopAPIServer(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if err := figures.Write(filepath.Join(artifactsDir, "figures.md")); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// buildFigures adds the image build's figures (build.sh's build.txt: sizes and
// the time of the build that made these images, which a cached run reuses).
func buildFigures() {
	data, err := os.ReadFile(filepath.Join(imageDir, "build.txt"))
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			figures.Add("image build: "+k, v)
		}
	}
}

// bundles are the lane's bundles as the VM fetches them, by name; TestMain
// hashes each once (hundreds of megabytes).
var bundles = map[string]protocol.BinaryArtifact{}

func bundle(t *testing.T, name string) protocol.BinaryArtifact {
	t.Helper()
	a, ok := bundles[name]
	if !ok {
		t.Fatalf("no bundle %s in %s", name, imageDir)
	}
	return a
}

// ostreeCommits are the OSTree repository's commits by version (build.sh names
// each in ostree-<version>.commit); ostreeRemoteURL is the repository as the VMs
// reach it.
var (
	ostreeCommits   = map[string]string{}
	ostreeRemoteURL string
)

// serveBundles serves the image directory to the VMs, hashes its bundles and
// reads the OSTree commits.
func serveBundles() error {
	var err error
	if server, err = lanekit.ServeArtifacts("127.0.0.1:0", imageDir); err != nil {
		return err
	}
	u, err := url.Parse(server.URL)
	if err != nil {
		return err
	}
	for _, name := range []string{"v2-good", "v3-broken"} {
		digest, err := backend.FileDigest(filepath.Join(imageDir, name+".raucb"))
		if err != nil {
			return err
		}
		bundles[name] = protocol.BinaryArtifact{URL: "http://" + net.JoinHostPort(hostFromVM, u.Port()) + "/" + name + ".raucb", Digest: digest}
	}
	for _, name := range []string{"v1", "v2-good", "v3-broken"} {
		c, err := os.ReadFile(filepath.Join(imageDir, "ostree-"+name+".commit"))
		if err != nil {
			return err
		}
		ostreeCommits[name] = strings.TrimSpace(string(c))
	}
	ostreeRemoteURL = "http://" + net.JoinHostPort(hostFromVM, u.Port()) + "/ostree-repo"
	return nil
}

// lane is one scenario's VM and clock.
type lane struct {
	t     *testing.T
	ctx   context.Context
	vm    *VM
	start time.Time
	boot  vmapi.Facts
}

// newLane prepares a VM from the image directory's disk image named disk.
func newLane(t *testing.T, disk string) *lane {
	t.Helper()
	dir := filepath.Join(artifactsDir, t.Name())
	_ = os.RemoveAll(dir)
	vm, err := NewVM(t.Name(), dir, imageDir, disk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.PowerCut()
		// The disk is the bulk of the directory; the console logs stay for the reader.
		_ = os.Remove(filepath.Join(dir, "disk.raw"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	t.Cleanup(cancel)
	return &lane{t: t, ctx: ctx, vm: vm, start: time.Now()}
}

func (l *lane) figure(name string, v any) { figures.Add(l.t.Name()+": "+name, v) }

// powerOn starts QEMU and waits for the first boot that reaches the helper.
func (l *lane) powerOn() vmapi.Facts {
	l.t.Helper()
	t0 := time.Now()
	if err := l.vm.Start(); err != nil {
		l.t.Fatal(err)
	}
	f, err := l.vm.WaitBoot(l.ctx, "", bootTimeout)
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Logf("powered on: slot %s, deployment %s, image %s, in %s (%s; modules %s)", f.Slot, f.Deployment, f.ImageVersion, time.Since(t0).Round(time.Second),
		f.BootTime, strings.Join(f.Modules, " "))
	l.boot = f
	return f
}

// reboot asks for an orderly reboot and waits for the next boot to reach the helper.
func (l *lane) reboot() (vmapi.Facts, time.Duration) {
	l.t.Helper()
	t0 := time.Now()
	if err := l.vm.Reboot(l.ctx); err != nil {
		l.t.Fatal(err)
	}
	f, err := l.vm.WaitBoot(l.ctx, l.boot.BootID, bootTimeout)
	if err != nil {
		l.t.Fatal(err)
	}
	d := time.Since(t0)
	l.t.Logf("rebooted in %s: slot %s, deployment %s, image %s", d.Round(time.Second), f.Slot, f.Deployment, f.ImageVersion)
	l.boot = f
	return f, d
}

func (l *lane) facts() vmapi.Facts {
	l.t.Helper()
	f, err := l.vm.Facts(l.ctx)
	if err != nil {
		l.t.Fatal(err)
	}
	return f
}

// expectBoots checks the slot and image of every boot that reached userspace.
func expectBoots(t *testing.T, f vmapi.Facts, want string) {
	t.Helper()
	var got []string
	for _, b := range f.Boots {
		got = append(got, b.Slot+":"+b.ImageVersion)
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("boots that reached userspace: %s, want %s", strings.Join(got, " "), want)
	}
}

// expectBooted checks, from inside the VM, which slot and image run.
func expectBooted(t *testing.T, f vmapi.Facts, slot, image string) {
	t.Helper()
	if f.Slot != slot || f.ImageVersion != image {
		t.Fatalf("booted slot %q image %q (cmdline %q), want slot %s image %s", f.Slot, f.ImageVersion, f.Cmdline, slot, image)
	}
	wantRoot := map[string]string{"A": "root=/dev/vda2", "B": "root=/dev/vda3"}[slot]
	if !strings.Contains(" "+f.Cmdline+" ", " "+wantRoot+" ") {
		t.Fatalf("cmdline %q does not mount %s", f.Cmdline, wantRoot)
	}
}

// expectEnv checks GRUB's environment, the bootloader's own record.
func expectEnv(t *testing.T, f vmapi.Facts, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if f.Grubenv[k] != v {
			t.Fatalf("grubenv %s=%q, want %q (all: %v)", k, f.Grubenv[k], v, f.Grubenv)
		}
	}
}
