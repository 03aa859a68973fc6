package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/readonlytest"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestRollbackOnReadOnlyUsrReturnsTheImage: an OS-image and Kubernetes update on a
// host whose /usr (kubeadm, kubelet) is a real read-only bind mount, as on ostree
// and bootc, fails its gates. The rollback returns the image (the node boots the
// old one), restores /etc, and ends RolledBack. Today's code restored
// /usr/bin/kubeadm first, failed with EROFS and never rolled the image back: the
// node kept the new image and was Degraded.
func TestRollbackOnReadOnlyUsrReturnsTheImage(t *testing.T) {
	if !readonlytest.InOwnMountNamespace(t) {
		return
	}
	g := NewWithT(t)
	f := newFixture(t, &gate.Error{Gate: "node-ready", Timeout: time.Second, Err: errors.New("node is not Ready")})
	for p, content := range map[string]string{kube.KubeadmBinary: "kubeadm\n", kube.KubeletBinary: "kubelet\n", "/etc/app.conf": "old\n"} {
		full := filepath.Join(f.root, p)
		g.Expect(os.MkdirAll(filepath.Dir(full), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(full, []byte(content), 0o755)).To(Succeed())
	}
	readonlytest.BindReadOnly(t, filepath.Join(f.root, "usr"))

	st, err := f.x.Start(context.Background(), workerPlan(true))
	g.Expect(err).NotTo(HaveOccurred())
	last := f.reports.last()
	g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack), "last status: %s %s", last.Reason, last.Message)
	status, _ := f.reboots.sim.Status(context.Background())
	g.Expect(status.Booted).To(Equal(simulated.DigestOf([]byte(simulated.InitialRef))), "booted back into the old image")
	data, _ := os.ReadFile(filepath.Join(f.root, "etc/app.conf"))
	g.Expect(string(data)).To(Equal("old\n"))
	runs, _ := f.x.Runs()
	g.Expect(runs).To(HaveKeyWithValue("rollback/backend-rollback", 1))
	g.Expect(runs).To(HaveKeyWithValue("rollback/restore-files", 1))
	g.Expect(runs).To(HaveKeyWithValue("rollback/reboot", 1))
}
