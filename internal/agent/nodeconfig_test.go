package agent

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/service"
)

func TestLoadNodeConfig(t *testing.T) {
	tests := []struct {
		name    string
		content *string
		want    NodeConfig
		wantErr string
	}{
		{name: "missing file is systemd", want: NodeConfig{}},
		{name: "command manager", content: ptr(`{"serviceManager":{"type":"command","restartKubelet":["/usr/local/bin/realnode-kubelet","restart"],"reboot":["/bin/false"]}}`),
			want: NodeConfig{ServiceManager: service.Config{Type: "command", RestartKubelet: []string{"/usr/local/bin/realnode-kubelet", "restart"}, Reboot: []string{"/bin/false"}}}},
		{name: "misspelt key", content: ptr(`{"serviceManager":{"type":"command","restartKublet":["x"]}}`), wantErr: `unknown field "restartKublet"`},
		{name: "not JSON", content: ptr(`serviceManager: command`), wantErr: "parse node configuration /etc/capi-inplace/node.json"},
		{name: "two objects", content: ptr(`{} {}`), wantErr: "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			if tt.content != nil {
				p := filepath.Join(root, NodeConfigPath)
				g.Expect(os.MkdirAll(filepath.Dir(p), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(p, []byte(*tt.content), 0o644)).To(Succeed())
			}
			got, err := LoadNodeConfig(root, NodeConfigPath)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func ptr(s string) *string { return &s }

// TestLoadNodeConfigStaysInTheHostRoot: /etc/capi-inplace as an absolute symlink
// is followed where the host sees it, inside the host root: a node.json the
// link's target holds in the agent's own file system is not read. Before, the
// plain join read it.
func TestLoadNodeConfigStaysInTheHostRoot(t *testing.T) {
	g := NewWithT(t)
	outside := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(outside, "node.json"), []byte(`{"serviceManager":{"type":"command","reboot":["/outside"]}}`), 0o644)).To(Succeed())
	root := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(root, "etc"), 0o755)).To(Succeed())
	g.Expect(os.Symlink(outside, filepath.Join(root, "etc/capi-inplace"))).To(Succeed())

	got, err := LoadNodeConfig(root, NodeConfigPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(NodeConfig{}), "the host has no node configuration at the link's target")

	g.Expect(os.MkdirAll(filepath.Join(root, outside), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(root, outside, "node.json"), []byte(`{"serviceManager":{"type":"command","reboot":["/host"]}}`), 0o644)).To(Succeed())
	got, err = LoadNodeConfig(root, NodeConfigPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.ServiceManager.Reboot).To(Equal([]string{"/host"}))
}
