package etcdtest

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestNoEtcdSkipsAtOnce: without an etcd binary a test using a member under the
// simulated kubelet is skipped, and returns, instead of hanging to the test binary's
// timeout (the skip used to happen where Kubelet's cleanup then waited forever).
func TestNoEtcdSkipsAtOnce(t *testing.T) {
	t.Setenv("ETCD_BIN", filepath.Join(t.TempDir(), "missing-etcd"))
	t.Setenv("CI", "")
	finished := make(chan bool, 1)
	go func() {
		var skipped bool
		t.Run("member", func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			root := t.TempDir()
			m := NewMember(t, t.TempDir(), "solo")
			manifest := filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml")
			if err := os.MkdirAll(filepath.Dir(manifest), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(manifest, Manifest(m, "/var/lib/etcd"), 0o600); err != nil {
				t.Fatal(err)
			}
			Kubelet(t, root, m)
		})
		finished <- skipped
	}()
	select {
	case skipped := <-finished:
		if !skipped {
			t.Fatal("a test without an etcd binary was not skipped")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a test without an etcd binary did not return within 20 s")
	}
}
