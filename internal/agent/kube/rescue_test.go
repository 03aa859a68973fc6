package kube

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

// stoppedMember is a member that does not answer (stopped) and whose restore
// runs restore.
type stoppedMember struct {
	etcd.Local
	restore func(ctx context.Context, cfg etcd.RestoreConfig) error
}

func (*stoppedMember) Status(context.Context) (etcd.Status, error) {
	return etcd.Status{}, os.ErrDeadlineExceeded
}
func (*stoppedMember) Stopped(context.Context, string) (bool, error) { return true, nil }
func (m *stoppedMember) Restore(ctx context.Context, cfg etcd.RestoreConfig) error {
	return m.restore(ctx, cfg)
}

// TestRestoreKeepsTheRescuePodWhileTheControlPlaneIsStopped: while a restore has
// etcd's and the API server's manifests out of the manifest directory, the rescue
// static pod is there (the agent's image, privileged, the host's root mounted).
// A restore that dies there (a power cut: nothing after that line runs) leaves it
// in place, and the repeat the rescue pod runs puts both manifests back and
// removes it.
func TestRestoreKeepsTheRescuePodWhileTheControlPlaneIsStopped(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	etcdManifest := "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.5:2380]\n"
	apiManifest := "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --advertise-address=127.0.0.1, --secure-port=1]\n"
	write(t, root, EtcdManifest, etcdManifest, 0o600)
	write(t, root, APIServerManifest, apiManifest, 0o600)
	write(t, root, EtcdDataDir+"/member/snap/db", "current", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	rescue := &RescuePod{Image: "registry.example/capi-inplace-agent:v1", Args: []string{"rescue", "--host-root=/host"}, HostRoot: "/host"}

	// The process dies while etcd restores its data.
	var seen []string
	member := &stoppedMember{restore: func(context.Context, etcd.RestoreConfig) error {
		for _, p := range []string{EtcdManifest, APIServerManifest, RescueManifest} {
			if _, err := os.Stat(filepath.Join(root, p)); err == nil {
				seen = append(seen, p)
			}
		}
		runtime.Goexit()
		return nil
	}}
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: member, Rescue: rescue}
	died := make(chan struct{})
	go func() {
		defer close(died)
		_ = h.RestoreEtcd(context.Background(), "a1")
	}()
	<-died
	g.Expect(seen).To(Equal([]string{RescueManifest}), "while etcd and the API server are stopped, only the rescue pod is in the manifest directory")
	g.Expect(filepath.Join(root, RescueManifest)).To(BeAnExistingFile(), "the rescue pod outlives the process")

	var pod corev1.Pod
	g.Expect(yaml.Unmarshal([]byte(read(t, root, RescueManifest)), &pod)).To(Succeed())
	g.Expect(pod.Namespace).To(Equal("kube-system"))
	g.Expect(pod.Spec.HostNetwork).To(BeTrue(), "etcd answers on the host's loopback")
	g.Expect(pod.Spec.Containers).To(HaveLen(1))
	c := pod.Spec.Containers[0]
	g.Expect(c.Image).To(Equal(rescue.Image))
	g.Expect(c.Args).To(Equal(rescue.Args))
	g.Expect(c.SecurityContext.Privileged).To(HaveValue(BeTrue()))
	g.Expect(c.VolumeMounts).To(ConsistOf(corev1.VolumeMount{Name: "host", MountPath: "/host"}))
	g.Expect(pod.Spec.Volumes[0].HostPath.Path).To(Equal("/"))

	// The repeat (the rescue pod after the reboot, or the agent) finishes it.
	member.restore = func(_ context.Context, cfg etcd.RestoreConfig) error {
		return os.MkdirAll(filepath.Join(cfg.DataDir, "member", "snap"), 0o700)
	}
	g.Expect(h.RestoreEtcd(context.Background(), "a1")).To(Succeed())
	g.Expect(read(t, root, EtcdManifest)).To(Equal(etcdManifest))
	g.Expect(read(t, root, APIServerManifest)).To(Equal(apiManifest))
	g.Expect(filepath.Join(root, RescueManifest)).NotTo(BeAnExistingFile(), "the rescue pod is removed once the control plane is back")
}

// TestRestoreWithoutRescuePod: a host without a rescue pod (the simulated host,
// an agent that does not know its image) writes none.
func TestRestoreWithoutRescuePod(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	write(t, root, EtcdManifest, "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.5:2380]\n", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	var rescued bool
	member := &stoppedMember{restore: func(_ context.Context, cfg etcd.RestoreConfig) error {
		_, err := os.Stat(filepath.Join(root, RescueManifest))
		rescued = err == nil
		return os.MkdirAll(cfg.DataDir, 0o700)
	}}
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: member}
	g.Expect(h.RestoreEtcd(context.Background(), "a1")).To(Succeed())
	g.Expect(rescued).To(BeFalse())
}
