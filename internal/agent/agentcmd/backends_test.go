package agentcmd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
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

	bs := hostBackends(context.Background(), root, &backendtest.Runner{})
	g.Expect(backendNames(bs)).To(Equal([]string{"none"}))

	g.Expect(os.MkdirAll(filepath.Join(root, outside), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, outside, filepath.Base(registry.ConfigPath)), script, 0o644)).To(Succeed())
	bs = hostBackends(context.Background(), root, &backendtest.Runner{})
	g.Expect(backendNames(bs)).To(Equal([]string{"none", "script"}))
	g.Expect(bs["script"]).NotTo(BeAssignableToTypeOf(registry.Unavailable{}))
}
