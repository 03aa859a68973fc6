package simhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func newHost(t *testing.T, cp bool) (*Host, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.35.2"}}})
	h := New(t.TempDir(), "n1", client, logr.Discard())
	if err := h.Init(context.Background(), Options{KubernetesVersion: "v1.35.2", ControlPlane: cp}); err != nil {
		t.Fatal(err)
	}
	return h, client
}

func TestKubernetesLayerOnTheSimulatedHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, client := newHost(t, true)
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	plan := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply}

	// kubeadm refuses a version newer than itself, like the real one.
	err := k.KubeadmUpgrade(ctx, plan)
	g.Expect(err).To(MatchError(ContainSubstring(`Specified version to upgrade to "v1.36.0" is higher than the kubeadm version "v1.35.2"`)))

	members, err := k.EtcdSnapshot(ctx, "h1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(members).To(Equal(1))
	g.Expect(k.Backup(ctx, "h1", k.BackupSet(&protocol.NodePlan{Kubernetes: plan}))).To(Succeed())
	g.Expect(k.InstallBinaries(ctx, "v1.36.0")).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, plan)).To(Succeed())
	img, _ := h.manifestImage("kube-apiserver")
	g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.36.0"))
	g.Expect(h.RunningKubelet()).To(Equal("v1.35.2"), "the new kubelet runs only after a restart")
	g.Expect(k.RestartKubelet(ctx)).To(Succeed())
	g.Expect(h.RunningKubelet()).To(Equal("v1.36.0"))

	_, err = h.SyncKubelet(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	pod, err := client.CoreV1().Pods("kube-system").Get(ctx, "kube-apiserver-n1", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pod.Spec.Containers[0].Image).To(Equal("registry.k8s.io/kube-apiserver:v1.36.0"))
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(k.EtcdHealthy(ctx)).To(Succeed())

	// Rollback: files and binaries, then etcd data.
	g.Expect(k.Restore(ctx, "h1")).To(Succeed())
	g.Expect(k.RestoreEtcd(ctx, "h1")).To(Succeed())
	g.Expect(k.RestoreEtcd(ctx, "h1")).To(Succeed(), "idempotent")
	g.Expect(k.RestartKubelet(ctx)).To(Succeed())
	g.Expect(h.BinaryVersion("kubeadm")).To(Equal("v1.35.2"))
	g.Expect(h.RunningKubelet()).To(Equal("v1.35.2"))
	img, _ = h.manifestImage("kube-apiserver")
	g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.2"))
	db, _ := os.ReadFile(filepath.Join(h.Root, "var/lib/etcd/member/snap/db"))
	g.Expect(string(db)).To(Equal("etcd data written under Kubernetes v1.35.2\n"), "the snapshot is back")
	id, _ := os.ReadFile(filepath.Join(h.Root, "var/lib/etcd/member/sim-identity"))
	g.Expect(string(id)).To(Equal("name=n1\npeer-urls=https://n1:2380\ninitial-cluster=n1=https://n1:2380\ntoken=etcd-cluster\n"),
		"restored as the node's own member")
	g.Expect(filepath.Join(h.Root, kube.EtcdManifest)).To(BeARegularFile(), "the member runs again")
	g.Expect(k.EtcdHealthy(ctx)).To(Succeed())

	// Like a kubeadm host, the simulated one has no etcdctl or etcdutl.
	_, err = h.Runner().Run(ctx, backend.Command{Name: "etcdctl", Args: []string{"endpoint", "health"}})
	g.Expect(err).To(MatchError(ContainSubstring("exit status 127")))

	log, _ := os.ReadFile(h.simPath("commands.log"))
	g.Expect(string(log)).To(ContainSubstring("kubeadm upgrade apply v1.36.0 --yes\n"))
}

func TestWorkerUpgradeNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, _ := newHost(t, false)
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	g.Expect(k.InstallBinaries(ctx, "v1.36.0")).To(Succeed())
	g.Expect(k.KubeadmUpgrade(ctx, protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode})).To(Succeed())
	cfg, _ := os.ReadFile(filepath.Join(h.Root, kube.KubeletConfig))
	g.Expect(string(cfg)).To(ContainSubstring("written by kubeadm v1.36.0"))
	g.Expect(k.EtcdHealthy(ctx)).To(HaveOccurred(), "a worker has no etcd")
}

func TestRebootAndFaults(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, _ := newHost(t, false)
	b1, _ := h.BootID(ctx)
	g.Expect(h.Reboot(ctx)).To(MatchError(executor.ErrRebooted))
	b2, _ := h.BootID(ctx)
	g.Expect(b2).NotTo(Equal(b1))
	g.Expect(h.Boots()).To(Equal(2))

	g.Expect(h.BeforeAction(ctx, "gates")).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-action-rollback-restore-files"), []byte("disk full\n"), 0o644)).To(Succeed())
	g.Expect(h.BeforeAction(ctx, "rollback/restore-files")).To(MatchError("simulated fault (fail-action-rollback-restore-files): disk full"))

	g.Expect(h.GateFault("node-ready")).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-gate"), []byte("etcd-health"), 0o644)).To(Succeed())
	g.Expect(h.GateFault("node-ready")).To(Succeed())
	g.Expect(h.GateFault("etcd-health")).To(HaveOccurred())

	// pause-before blocks until the file goes away.
	g.Expect(os.WriteFile(h.simPath("pause-before-kubeadm-upgrade"), nil, 0o644)).To(Succeed())
	done := make(chan error)
	go func() { done <- h.BeforeAction(ctx, "kubeadm-upgrade") }()
	g.Eventually(func() string { return h.readTrim(h.simPath("paused-at")) }).Should(Equal("kubeadm-upgrade"))
	g.Consistently(done, 200*time.Millisecond).ShouldNot(Receive())
	g.Expect(os.Remove(h.simPath("pause-before-kubeadm-upgrade"))).To(Succeed())
	g.Eventually(done).Should(Receive(BeNil()))
}

func TestAPIOutage(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, _ := newHost(t, false)
	now := time.Unix(1000, 0)
	h.Now = func() time.Time { return now }
	g.Expect(os.WriteFile(h.simPath("api-outage-seconds"), []byte("30"), 0o644)).To(Succeed())
	g.Expect(h.APIDown()).To(BeFalse())
	_, err := h.Runner().Run(ctx, cmd("kubeadm", "upgrade", "node"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.APIDown()).To(BeTrue())
	_, err = h.SyncKubelet(ctx, "")
	g.Expect(errors.Is(err, ErrAPIDown)).To(BeTrue())
	now = now.Add(31 * time.Second)
	g.Expect(h.APIDown()).To(BeFalse())
	// One-shot: the next upgrade does not start another outage.
	_, _ = h.Runner().Run(ctx, cmd("kubeadm", "upgrade", "node"))
	g.Expect(h.APIDown()).To(BeFalse())
}

// TestKubeletOnAnInMemoryStyleAPIServer: no status subresource, mirror pods
// created by the infrastructure provider without containers.
func TestKubeletOnAnInMemoryStyleAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, client := newHost(t, true)
	for _, c := range staticPods() {
		_, err := client.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c + "-n1", Namespace: "kube-system"},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			return true, nil, apierrors.NewNotFound(corev1.Resource("nodes"), "n1")
		}
		return false, nil, nil
	})
	g.Expect(h.Install(ctx, "v1.36.0")).To(Succeed())
	_, err := h.Runner().Run(ctx, cmd("systemctl", "restart", "kubelet"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = h.Runner().Run(ctx, cmd("kubeadm", "upgrade", "node"))
	g.Expect(err).NotTo(HaveOccurred())
	v, err := h.SyncKubelet(ctx, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(Equal("v1.36.0"))
	n, _ := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal("v1.36.0"))
	pod, _ := client.CoreV1().Pods("kube-system").Get(ctx, "kube-controller-manager-n1", metav1.GetOptions{})
	g.Expect(containerImage(pod, "kube-controller-manager")).To(Equal("registry.k8s.io/kube-controller-manager:v1.36.0"))
}

// TestEtcdOfAThreeMemberClusterIsNeverRestored: the simulated member store reports
// the member count, and the restore of a multi-member snapshot is refused.
func TestEtcdOfAThreeMemberClusterIsNeverRestored(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, _ := newHost(t, true)
	g.Expect(h.SetEtcdMembers(3)).To(Succeed())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	members, err := k.EtcdSnapshot(ctx, "a1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(members).To(Equal(3))
	g.Expect(k.RestoreEtcd(ctx, "a1")).To(MatchError(ContainSubstring("does not have exactly one member")))
	g.Expect(filepath.Join(h.Root, kube.EtcdManifest)).To(BeARegularFile())
}
