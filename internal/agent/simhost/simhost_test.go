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
	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
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
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd(), PreflightRetryPause: time.Millisecond}
	plan := protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeApply}

	// kubeadm refuses a version newer than itself, like the real one.
	err := k.KubeadmUpgrade(ctx, plan)
	g.Expect(err).To(MatchError(ContainSubstring(`Specified version to upgrade to "v1.36.0" is higher than the kubeadm version "v1.35.2"`)))

	members, err := k.EtcdSnapshot(ctx, "h1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(members).To(Equal(1))
	g.Expect(k.Backup(ctx, "h1", k.BackupSet(&protocol.NodePlan{Kubernetes: plan}))).To(Succeed())
	g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.0"})).To(Succeed())
	g.Expect(h.BinaryVersion("kubelet")).To(Equal("v1.35.2"), "kubeadm alone is installed before kubeadm upgrade")
	g.Expect(k.KubeadmUpgrade(ctx, plan)).To(Succeed())
	img, _ := h.manifestImage("kube-apiserver")
	g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.36.0"))
	g.Expect(k.InstallKubelet(ctx, plan)).To(Succeed())
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
	g.Expect(string(log)).To(ContainSubstring("kubeadm upgrade apply phase preflight v1.36.0 --yes\n"))
	g.Expect(string(log)).To(ContainSubstring("kubeadm upgrade apply v1.36.0 --yes --skip-phases=preflight\n"))
}

func TestWorkerUpgradeNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, _ := newHost(t, false)
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: "v1.36.0"})).To(Succeed())
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

	// fail-action-<action> fails the calls made for that action, and only those.
	k := h.Kube(okHost{})
	restore := executor.WithAction(ctx, "rollback/restore-files")
	g.Expect(k.Restore(restore, "a")).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-action-rollback-restore-files"), []byte("disk full\n"), 0o644)).To(Succeed())
	g.Expect(k.Restore(restore, "a")).To(MatchError("simulated fault (fail-action-rollback-restore-files): disk full"))
	g.Expect(k.Restore(executor.WithAction(ctx, "gates"), "a")).To(Succeed())
	g.Expect(k.Restore(ctx, "a")).To(Succeed(), "a call outside any action")
	g.Expect(h.Gates(okGates{}).Run(executor.WithAction(ctx, "gates"), nil)).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-action-gates"), nil, 0o644)).To(Succeed())
	g.Expect(h.Gates(okGates{}).Run(executor.WithAction(ctx, "gates"), nil)).To(MatchError("simulated fault (fail-action-gates): injected failure"))
	g.Expect(os.WriteFile(h.simPath("fail-action-reboot"), nil, 0o644)).To(Succeed())
	g.Expect(h.Reboot(executor.WithAction(ctx, "reboot"))).To(MatchError(ContainSubstring("fail-action-reboot")))
	g.Expect(h.Boots()).To(Equal(2), "a failed reboot does not boot")

	// fail-gate fails the checker's calls made for the named gate (empty: every
	// gate), through the dependencies the simulated host wraps.
	wrapped, ok := h.Gates(&gate.Checker{Etcd: okEtcd{}, Nodes: okNodes{}}).(faultyGates)
	g.Expect(ok).To(BeTrue())
	c, ok := wrapped.next.(*gate.Checker)
	g.Expect(ok).To(BeTrue(), "the agent's Checker runs with its dependencies wrapped")
	health, ready := gate.WithGate(ctx, "etcd-health"), gate.WithGate(ctx, "node-ready")
	g.Expect(c.Etcd.EtcdHealthy(health)).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-gate"), []byte("etcd-health"), 0o644)).To(Succeed())
	_, err := c.Nodes.Node(ready)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Etcd.EtcdHealthy(health)).To(MatchError("simulated fault (fail-gate): gate etcd-health fails"))
	g.Expect(c.Etcd.EtcdQuorum(gate.WithGate(ctx, "etcd-quorum"))).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("fail-gate"), nil, 0o644)).To(Succeed())
	_, err = c.Nodes.Node(ready)
	g.Expect(err).To(MatchError(ContainSubstring("simulated fault (fail-gate): gate node-ready fails")))
	g.Expect(c.Etcd.EtcdHealthy(ctx)).To(Succeed(), "a call outside any gate")
	g.Expect(os.Remove(h.simPath("fail-gate"))).To(Succeed())

	// pause-before holds the journal save that begins the action until the file
	// goes away; the saves around it pass.
	mem := &journal.Memory{}
	j := h.Journal(ctx, mem)
	e := journal.Entry{Key: "p"}
	g.Expect(j.Save(e)).To(Succeed())
	g.Expect(os.WriteFile(h.simPath("pause-before-kubeadm-upgrade"), nil, 0o644)).To(Succeed())
	e.Begin("kubeadm-upgrade")
	done := make(chan error)
	go func() { done <- j.Save(e) }()
	g.Eventually(func() string { return h.readTrim(h.simPath("paused-at")) }).Should(Equal("kubeadm-upgrade"))
	g.Consistently(done, 200*time.Millisecond).ShouldNot(Receive())
	saved, _ := mem.Load()
	g.Expect(saved.InFlight).To(BeEmpty(), "paused before the action's start is recorded")
	g.Expect(os.Remove(h.simPath("pause-before-kubeadm-upgrade"))).To(Succeed())
	g.Eventually(done).Should(Receive(BeNil()))
	saved, _ = mem.Load()
	g.Expect(saved.InFlight).To(Equal("kubeadm-upgrade"))
	g.Expect(h.readTrim(h.simPath("paused-at"))).To(BeEmpty())

	// A pause ends with its context.
	g.Expect(os.WriteFile(h.simPath("pause-before-restart-kubelet"), nil, 0o644)).To(Succeed())
	cctx, cancel := context.WithCancel(ctx)
	e.Begin("restart-kubelet")
	go func() { done <- h.Journal(cctx, mem).Save(e) }()
	g.Eventually(func() string { return h.readTrim(h.simPath("paused-at")) }).Should(Equal("restart-kubelet"))
	cancel()
	g.Eventually(done).Should(Receive(MatchError(context.Canceled)))
}

// okHost and okGates succeed at what the fault tests call.
type okHost struct{ executor.Host }

func (okHost) Restore(context.Context, string) error { return nil }

type okGates struct{}

type okEtcd struct{}

func (okEtcd) EtcdHealthy(context.Context) error { return nil }
func (okEtcd) EtcdQuorum(context.Context) error  { return nil }

type okNodes struct{}

func (okNodes) Node(context.Context) (*corev1.Node, error)               { return &corev1.Node{}, nil }
func (okNodes) Pod(context.Context, string, string) (*corev1.Pod, error) { return &corev1.Pod{}, nil }

func (okGates) Run(context.Context, *protocol.NodePlan) error { return nil }

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
	g.Expect(h.Install(ctx, kube.KubeadmBinary, "v1.36.0")).To(Succeed())
	g.Expect(h.Install(ctx, kube.KubeletBinary, "v1.36.0")).To(Succeed())
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
