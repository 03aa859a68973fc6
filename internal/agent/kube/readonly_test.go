package kube

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	"github.com/capi-inplace/capi-inplace/internal/agent/readonlytest"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// readOnlyUsrHost is a host root whose /usr (with kubeadm and kubelet) is a real
// read-only bind mount, as on ostree and bootc, backed up for a Kubernetes upgrade
// of a worker whose /etc/app.conf the plan changes.
func readOnlyUsrHost(t *testing.T) (*Host, string) {
	t.Helper()
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, KubeadmBinary, "kubeadm v1.35.0\n", 0o755)
	write(t, root, KubeletBinary, "kubelet v1.35.0\n", 0o755)
	write(t, root, "/etc/app.conf", "old\n", 0o644)
	h := &Host{Root: root, Runner: &backendtest.Runner{}}
	p := protocol.NewPlan("n1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	p.Files = []protocol.File{{Path: "/etc/app.conf", Content: []byte("new\n")}}
	g.Expect(h.BackupSet(p)).To(ContainElements(KubeadmBinary, KubeletBinary))
	g.Expect(h.Backup(context.Background(), "a1", h.BackupSet(p))).To(Succeed())
	g.Expect(h.WriteFiles(context.Background(), p.Files)).To(Succeed())
	return h, root
}

// TestRestoreOnReadOnlyUsr: on a read-only /usr that the update did not change,
// restoring the backup succeeds and restores /etc (today's code rewrote every
// backed-up path and failed with EROFS on /usr/bin/kubeadm, so the node was left
// half rolled back and Degraded).
func TestRestoreOnReadOnlyUsr(t *testing.T) {
	if !readonlytest.InOwnMountNamespace(t) {
		return
	}
	g := NewWithT(t)
	h, root := readOnlyUsrHost(t)
	readonlytest.BindReadOnly(t, filepath.Join(root, "usr"))
	for range 2 { // idempotent
		g.Expect(h.Restore(context.Background(), "a1")).To(Succeed())
	}
	g.Expect(read(t, root, "/etc/app.conf")).To(Equal("old\n"))
	g.Expect(read(t, root, KubeadmBinary)).To(Equal("kubeadm v1.35.0\n"))
}

// TestRestoreReadOnlyUsrChangedByImage: the image changed /usr/bin/kubeadm (an OS
// update booted into it before the backup, or the node runs another image now).
// Restore alone fails honestly: nothing would bring /usr back. With the image
// rollback (RestoreWithImageRollback, after DeriveRollback rolled the image back
// first) /usr is left to the image, which restores it at the reboot, and /etc is
// restored.
func TestRestoreReadOnlyUsrChangedByImage(t *testing.T) {
	if !readonlytest.InOwnMountNamespace(t) {
		return
	}
	g := NewWithT(t)
	h, root := readOnlyUsrHost(t)
	write(t, root, KubeadmBinary, "kubeadm v1.36.0 from the new image\n", 0o755)
	readonlytest.BindReadOnly(t, filepath.Join(root, "usr"))

	err := h.Restore(context.Background(), "a1")
	g.Expect(errors.Is(err, unix.EROFS)).To(BeTrue(), "got %v", err)

	for range 2 {
		g.Expect(h.RestoreWithImageRollback(context.Background(), "a1")).To(Succeed())
	}
	g.Expect(read(t, root, "/etc/app.conf")).To(Equal("old\n"))
	g.Expect(read(t, root, KubeadmBinary)).To(Equal("kubeadm v1.36.0 from the new image\n"), "the image's, until the reboot into the old image")
}
