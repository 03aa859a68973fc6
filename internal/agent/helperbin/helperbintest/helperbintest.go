// Package helperbintest builds the agent's helper binaries (cmd/<name>) for tests.
package helperbintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

type built struct {
	once sync.Once
	path string
	err  error
}

var (
	mu     sync.Mutex
	builds = map[string]*built{}
)

// Build returns the helper binary cmd/<name>, built from this source tree once per
// test process (into a per-user directory under the system's temporary
// directory, replaced atomically, so test processes of several packages share
// one file and always run the current code). It fails the test when the build
// fails.
func Build(t testing.TB, name string) string {
	t.Helper()
	mu.Lock()
	b := builds[name]
	if b == nil {
		b = &built{}
		builds[name] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.path, b.err = build(name) })
	if b.err != nil {
		t.Fatalf("build the helper %s: %v", name, b.err)
	}
	return b.path
}

func build(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for ; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
	}
	out := filepath.Join(os.TempDir(), fmt.Sprintf("%s-test-%d", name, os.Getuid()))
	if err := os.MkdirAll(out, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, b)
	}
	path := filepath.Join(out, name)
	if err := os.Rename(bin, path); err != nil {
		return "", err
	}
	return path, nil
}
