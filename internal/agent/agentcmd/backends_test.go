package agentcmd

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/packages"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
)

// TestHostBackendsReadTheConfigurationInTheHostRoot: the OS backend
// configuration under a symlinked /etc/capi-inplace is read where the host sees
// it, inside the host root; a file at the link's target in the agent's own file
// system configures nothing. Before, the plain join read it.
func TestHostBackendsReadTheConfigurationInTheHostRoot(t *testing.T) {
	g := NewWithT(t)
	outside := t.TempDir()
	script := []byte(`{"script": {"path": "/usr/local/bin/os-update", "capabilities": {}}}`)
	g.Expect(os.WriteFile(filepath.Join(outside, filepath.Base(registry.ConfigPath)), script, 0o644)).To(Succeed())
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "etc"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(root, filepath.Dir(registry.ConfigPath)))).To(Succeed())

	bs, release := hostBackends(context.Background(), root, &backendtest.Runner{})
	release()
	g.Expect(backendNames(bs)).To(Equal([]string{"none"}))

	g.Expect(os.MkdirAll(filepath.Join(root, outside), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, outside, filepath.Base(registry.ConfigPath)), script, 0o644)).To(Succeed())
	bs, release = hostBackends(context.Background(), root, &backendtest.Runner{})
	release()
	g.Expect(backendNames(bs)).To(Equal([]string{"none", "script"}))
	g.Expect(bs["script"]).NotTo(BeAssignableToTypeOf(registry.Unavailable{}))
}

// TestHostBackendsKeepTheirStateInTheHostRoot: a backend's state directory under
// a symlinked /var/lib/capi-inplace is where the host sees it, inside the host
// root; the link's target in the agent's own file system gets nothing. Before,
// the plain join wrote the packages backend's record through the link.
func TestHostBackendsKeepTheirStateInTheHostRoot(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	config := filepath.Join(root, registry.ConfigPath)
	g.Expect(os.MkdirAll(filepath.Dir(config), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(config, []byte(`{"packages": {"manager": "apt"}}`), 0o644)).To(Succeed())
	outside := t.TempDir()
	link := filepath.Join(root, path.Dir(registry.DefaultStateDir))
	g.Expect(os.MkdirAll(filepath.Dir(link), 0o755)).To(Succeed())
	g.Expect(os.Symlink(outside, link)).To(Succeed())

	r := (&backendtest.Runner{}).On("dpkg-query", "curl=7.88.1-10\n", nil)
	bs, release := hostBackends(context.Background(), root, r)
	defer release()
	// A pinned directory is an open descriptor: one that nothing holds is closed
	// by the collector, its /proc/self/fd path gone (as on the VMs of make e2e-os,
	// where the agent then failed to stage).
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	g.Expect(bs[packages.Name]).NotTo(BeAssignableToTypeOf(registry.Unavailable{}))
	ref := "curl=7.88.1-10+deb12u8"
	digest, err := packages.Digest(ref)
	g.Expect(err).NotTo(HaveOccurred())
	// Staging records the versions before the change first; the rest of the
	// step (the download) finds no answer from the fake runner.
	_ = bs[packages.Name].Stage(context.Background(), backend.Artifact{Ref: ref, Digest: digest})

	escaped, err := filepath.Glob(filepath.Join(outside, "*", packages.Name, "*.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(escaped).To(BeEmpty(), "state written through the link, outside the host root")
	inside, err := filepath.Glob(filepath.Join(root, outside, "*", packages.Name, "packages-*.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inside).To(HaveLen(1), "the record of the versions before, inside the host root")
}
