package backendtest

import (
	"os"
	"os/exec"
	"testing"
)

// NeedTools skips the test when one of the named tools is missing outside CI. In CI
// hack/install-deps.sh installs them, so a missing tool fails the test there: the
// backends' real-tool tests must never silently stop running.
func NeedTools(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("%s not installed (run hack/install-deps.sh)", name)
			}
			t.Fatalf("%s not installed in CI: hack/install-deps.sh must install it", name)
		}
	}
}
