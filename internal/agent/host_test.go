package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// TestHostRunnerChroots runs a static program inside a directory standing for the
// host: it sees the directory as its /, with no chroot binary involved.
func TestHostRunnerChroots(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	g := NewWithT(t)
	root := t.TempDir()
	// A static program standing for a host tool: it prints a file.
	src := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(src, "main.go"), []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.Write(b)
}
`), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hostcat\n"), 0o644)).To(Succeed())
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "hostcat"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	g.Expect(os.WriteFile(filepath.Join(root, "marker"), []byte("host root\n"), 0o644)).To(Succeed())

	r := HostRunner{Root: root, Exec: backend.ExecRunner{}}
	res, err := r.Run(context.Background(), backend.Command{Name: "/bin/hostcat", Args: []string{"/marker"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(res.Stdout)).To(Equal("host root\n"))

	// A bare name is found on the host's PATH inside the root, not on the agent's
	// own (where the host's kubeadm and systemctl are not).
	res, err = r.Run(context.Background(), backend.Command{Name: "hostcat", Args: []string{"/marker"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(res.Stdout)).To(Equal("host root\n"))
	_, err = r.Run(context.Background(), backend.Command{Name: "no-such-host-tool"})
	g.Expect(err).To(MatchError(ContainSubstring("not found on the host's PATH")))

	_, err = r.Run(context.Background(), backend.Command{Name: "/bin/hostcat", Args: []string{"/missing"}})
	var ce *backend.CommandError
	g.Expect(err).To(BeAssignableToTypeOf(ce))
	g.Expect(err.Error()).To(ContainSubstring("/missing"))
}
