package simhost

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestWorkerStepsEveryMinorOfAChain: a worker laid out at v1.33.0 takes the steps
// of a chained upgrade (v1.34.0, v1.35.0, v1.36.0) one at a time, as the
// GenerateUpgradePlan hook plans them: at each step the binaries, the kubelet
// configuration and the reported kubelet version are the step's, and the kubelet's
// instance-config.yaml appears with the first minor whose kubeadm writes it (1.35).
func TestWorkerStepsEveryMinorOfAChain(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.33.0"}}})
	h := New(t.TempDir(), "n1", client, logr.Discard())
	g.Expect(h.Init(ctx, Options{KubernetesVersion: "v1.33.0"})).To(Succeed())
	g.Expect(filepath.Join(h.Root, "var/lib/kubelet/instance-config.yaml")).NotTo(BeAnExistingFile())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	reported := "v1.33.0"
	for _, v := range []string{"v1.34.0", "v1.35.0", "v1.36.0"} {
		g.Expect(k.InstallKubeadm(ctx, protocol.KubernetesPlan{Version: v})).To(Succeed(), v)
		g.Expect(k.KubeadmUpgrade(ctx, protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: v, Action: protocol.KubeadmUpgradeNode})).To(Succeed(), v)
		g.Expect(k.InstallKubelet(ctx, protocol.KubernetesPlan{Version: v})).To(Succeed(), v)
		g.Expect(k.RestartKubelet(ctx)).To(Succeed(), v)
		var err error
		reported, err = h.SyncKubelet(ctx, reported)
		g.Expect(err).NotTo(HaveOccurred(), v)
		g.Expect(reported).To(Equal(v))
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Status.NodeInfo.KubeletVersion).To(Equal(v))
		g.Expect(h.BinaryVersion("kubeadm")).To(Equal(v))
		cfg, err := os.ReadFile(filepath.Join(h.Root, kube.KubeletConfig))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(cfg)).To(ContainSubstring("written by kubeadm " + v))
		if v >= "v1.35.0" {
			g.Expect(filepath.Join(h.Root, "var/lib/kubelet/instance-config.yaml")).To(BeAnExistingFile(), v)
		}
	}
}
