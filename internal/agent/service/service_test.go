package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    any
		wantErr string
	}{
		{"zero value is systemd", Config{}, Systemd{}, ""},
		{"systemd", Config{Type: "systemd"}, Systemd{}, ""},
		{"command", Config{Type: "command", RestartKubelet: []string{"/usr/local/bin/kubelet-ctl", "restart"}}, Command{}, ""},
		{"command without restartKubelet", Config{Type: "command", Reboot: []string{"/sbin/reboot"}}, nil, "needs restartKubelet"},
		{"command with an empty name", Config{Type: "command", RestartKubelet: []string{""}}, nil, "needs restartKubelet"},
		{"command with an empty reboot name", Config{Type: "command", RestartKubelet: []string{"x"}, Reboot: []string{"", "now"}}, nil, "reboot has an empty command name"},
		{"systemd with commands", Config{RestartKubelet: []string{"x"}}, nil, "apply to type command only"},
		{"unknown type", Config{Type: "openrc"}, nil, `type "openrc" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m, err := New(tt.cfg, &backendtest.Runner{})
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(m).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(m).To(BeAssignableToTypeOf(tt.want))
		})
	}
}

func TestSystemdRunsSystemctl(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	r := (&backendtest.Runner{}).On("systemctl", "", nil)
	m, err := New(Config{}, r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.DaemonReload(ctx)).To(Succeed())
	g.Expect(m.Restart(ctx, KubeletUnit)).To(Succeed())
	g.Expect(m.Reboot(ctx)).To(Succeed())
	g.Expect(r.Calls()).To(Equal([]string{"systemctl daemon-reload", "systemctl restart kubelet", "systemctl reboot"}))
}

// TestCommandRunsTheConfiguredCommands runs real commands: the restart and
// reboot commands append to a file, as a lane's kubelet supervisor would act.
func TestCommandRunsTheConfiguredCommands(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	sh := func(word string) []string { return []string{"/bin/sh", "-c", "echo " + word + " >> " + log} }
	m, err := New(Config{Type: TypeCommand, RestartKubelet: sh("restart-kubelet"), Reboot: sh("reboot")}, backend.ExecRunner{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(m.DaemonReload(ctx)).To(Succeed(), "nothing to reload without a command")
	g.Expect(m.Restart(ctx, KubeletUnit)).To(Succeed())
	g.Expect(m.Reboot(ctx)).To(Succeed())
	raw, err := os.ReadFile(log)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).To(Equal("restart-kubelet\nreboot\n"))

	err = m.Restart(ctx, "chrony")
	g.Expect(errors.Is(err, ErrNotConfigured)).To(BeTrue(), "error %v", err)
	g.Expect(err).To(MatchError(ContainSubstring("restart chrony")))
}

func TestCommandFailures(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	m, err := New(Config{Type: TypeCommand, RestartKubelet: []string{"/bin/sh", "-c", "echo supervisor gone >&2; exit 3"}}, backend.ExecRunner{})
	g.Expect(err).NotTo(HaveOccurred())
	err = m.Restart(ctx, KubeletUnit)
	g.Expect(err).To(MatchError(ContainSubstring("supervisor gone")))
	err = m.Reboot(ctx)
	g.Expect(errors.Is(err, ErrNotConfigured)).To(BeTrue(), "error %v", err)
}
