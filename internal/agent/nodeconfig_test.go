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
