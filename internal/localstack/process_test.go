package localstack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestStopKillsTheWholeProcessGroup: teardown must leave nothing behind, including
// grandchildren (a manager's helpers, a shell's background jobs).
func TestStopKillsTheWholeProcessGroup(t *testing.T) {
	tests := []struct {
		name string
		stop func(*Process)
	}{
		{"Stop (TERM, then KILL)", func(p *Process) { p.Stop(2 * time.Second) }},
		{"Kill (crash)", func(p *Process) { p.Kill() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "grandchild.pid")
			p, err := StartProcess(ProcessSpec{
				Name:   "sh",
				Path:   "/bin/sh",
				Args:   []string{"-c", "sleep 300 & echo $! > '" + pidFile + "'; wait"},
				LogDir: dir,
			})
			g.Expect(err).NotTo(HaveOccurred())
			var grandchild int
			g.Eventually(func() error {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return err
				}
				grandchild, err = strconv.Atoi(strings.TrimSpace(string(b)))
				return err
			}, 5*time.Second, 50*time.Millisecond).Should(Succeed())
			g.Expect(syscall.Kill(grandchild, 0)).To(Succeed(), "grandchild runs")

			tt.stop(p)

			exited, _ := p.Exited()
			g.Expect(exited).To(BeTrue())
			g.Eventually(func() error { return syscall.Kill(grandchild, 0) }, 5*time.Second, 50*time.Millisecond).
				Should(MatchError(syscall.ESRCH), "grandchild must be gone")
			log, err := os.ReadFile(p.LogPath)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(log)).To(ContainSubstring("=== "), "start and exit are logged")
		})
	}
}
