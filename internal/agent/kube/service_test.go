package kube

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// TestRestartKubeletUsesTheNodesServiceManager: on a node configured with a
// command service manager, restart-kubelet runs that command and no systemctl.
func TestRestartKubeletUsesTheNodesServiceManager(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "supervisor")
	svc, err := service.New(service.Config{Type: service.TypeCommand,
		RestartKubelet: []string{"/bin/sh", "-c", "echo restart >> " + log},
		DaemonReload:   []string{"/bin/sh", "-c", "echo reload >> " + log}}, backend.ExecRunner{})
	g.Expect(err).NotTo(HaveOccurred())
	// The host's own runner would fail any systemctl call: there is none here.
	h := &Host{Root: t.TempDir(), Runner: backend.ExecRunner{}, Services: svc}
	g.Expect(h.RestartKubelet(context.Background())).To(Succeed())
	raw, err := os.ReadFile(log)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).To(Equal("reload\nrestart\n"))
}
