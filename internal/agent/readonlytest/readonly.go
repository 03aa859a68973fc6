// Package readonlytest runs a test in a private mount namespace, where it can
// bind-mount a directory of its host root read-only, as /usr is on ostree and bootc
// hosts, without the mount being seen (or left behind) outside the test.
//
// Imports: the standard library and golang.org/x/sys/unix only.
package readonlytest

import (
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// childEnv marks the re-executed test binary inside the namespace.
const childEnv = "CAPI_INPLACE_READONLYTEST_CHILD"

// InOwnMountNamespace reports whether the calling test runs inside its private mount
// namespace. Outside it, it re-runs only the calling test (a top-level test) there
// under unshare(1) and reports its result, so the caller returns when it is false:
//
//	if !readonlytest.InOwnMountNamespace(t) { return }
//
// It skips the test where it cannot run: not root, or no unshare(1).
func InOwnMountNamespace(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed")
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("the test in its mount namespace failed: %v", err)
	}
	return false
}

// BindReadOnly makes dir read-only by bind-mounting it onto itself read-only (in
// the private namespace of InOwnMountNamespace), as a real ostree host's /usr is.
func BindReadOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Getenv(childEnv) == "" {
		t.Fatal("BindReadOnly outside InOwnMountNamespace")
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.WriteFile(dir+"/.probe", nil, 0o600); err == nil {
		t.Fatalf("%s is still writable after the read-only bind mount", dir)
	}
}
