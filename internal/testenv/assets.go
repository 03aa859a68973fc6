package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// AssetsEnv is the variable that names the directory of envtest's binaries
// (kube-apiserver, etcd, kubectl); `make test` sets it to bin/.
const AssetsEnv = "KUBEBUILDER_ASSETS"

// Assets applies the one rule for envtest's binaries. It returns their directory
// when KUBEBUILDER_ASSETS names one holding kube-apiserver and etcd. Without
// KUBEBUILDER_ASSETS it returns a skip reason outside CI and an error when CI is
// set; a directory missing a binary is always an error.
func Assets() (dir, skip string, err error) {
	dir = os.Getenv(AssetsEnv)
	if dir == "" {
		if os.Getenv("CI") == "" {
			return "", AssetsEnv + " is unset: run `make test` (it builds bin/ and sets it)", nil
		}
		return "", "", fmt.Errorf("%s is unset in CI: run `make test` (it points it at bin/, built by `make tools`)", AssetsEnv)
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", "", fmt.Errorf("envtest asset %s missing in %s=%s (make tools builds it): %w", b, AssetsEnv, dir, err)
		}
	}
	return dir, "", nil
}

// RequireAssets is Assets for one test: it returns the binaries' directory, skips
// the test outside CI without KUBEBUILDER_ASSETS and fails it otherwise.
func RequireAssets(t testing.TB) string {
	t.Helper()
	dir, skip, err := Assets()
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	return dir
}

// Unavailable reports a tool or input the test needs and does not have: it skips
// the test outside CI and fails it when CI is set (the same rule as Assets, for
// promtool, clusterctl and the like).
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "" {
		t.Skip(msg)
	}
	t.Fatal(msg + " (in CI)")
}
