package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

var helper struct {
	once sync.Once
	path string
	err  error
}

// Helper returns the etcd helper binary (cmd/capi-inplace-etcd) that etcd.Local
// runs, built from this source tree once per test process (into a per-user
// directory under the system's temporary directory, replaced atomically, so test
// processes of several packages share one file and always run the current code).
// It fails the test when the build fails.
func Helper(t testing.TB) string {
	t.Helper()
	helper.once.Do(func() { helper.path, helper.err = buildHelper() })
	if helper.err != nil {
		t.Fatalf("build the etcd helper: %v", helper.err)
	}
	return helper.path
}

func buildHelper() (string, error) {
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
	out := filepath.Join(os.TempDir(), fmt.Sprintf("capi-inplace-etcd-test-%d", os.Getuid()))
	if err := os.MkdirAll(out, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	built := filepath.Join(tmp, etcd.HelperName)
	cmd := exec.Command("go", "build", "-o", built, "./cmd/"+etcd.HelperName)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", etcd.HelperName, err, b)
	}
	path := filepath.Join(out, etcd.HelperName)
	if err := os.Rename(built, path); err != nil {
		return "", err
	}
	return path, nil
}
