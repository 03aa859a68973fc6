package simhost

import (
	"context"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestUpgradeRendersStaticPodsFromKubeadmConfig: like the real kubeadm, the simulated
// one renders the control-plane manifests from the cluster's kubeadm-config on
// `kubeadm upgrade node` and `kubeadm upgrade apply`, so a ClusterConfiguration change
// nobody wrote into the ConfigMap never reaches the node. On the old code the
// manifests carried the image only, whatever the ConfigMap said.
func TestUpgradeRendersStaticPodsFromKubeadmConfig(t *testing.T) {
	for _, tt := range []struct{ name, config string }{
		{"kubeadm v1beta4 (list)", `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
apiServer:
  extraArgs:
  - name: audit-log-maxage
    value: "30"
  extraVolumes:
  - name: audit
    hostPath: /var/log/audit
    mountPath: /var/log/audit
controllerManager:
  extraArgs:
  - name: node-monitor-grace-period
    value: 50s
`},
		{"kubeadm v1beta3 (map)", `apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
apiServer:
  extraArgs:
    audit-log-maxage: "30"
  extraVolumes:
  - name: audit
    hostPath: /var/log/audit
    mountPath: /var/log/audit
controllerManager:
  extraArgs:
    node-monitor-grace-period: 50s
`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			h, client := newHost(t, true)
			k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
			plan := &protocol.NodePlan{Kubernetes: protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.35.2"}}

			// Without the ConfigMap: kubeadm's defaults, no extra flags.
			g.Expect(k.ControlPlaneConfig(ctx, plan)).To(Succeed())
			g.Expect(h.readManifest(t, "kube-apiserver")).NotTo(ContainSubstring("--audit-log-maxage"))

			_, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
				Data:       map[string]string{"ClusterConfiguration": tt.config},
			}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(k.ControlPlaneConfig(ctx, plan)).To(Succeed())
			api := h.readManifest(t, "kube-apiserver")
			g.Expect(api).To(ContainSubstring("    - --audit-log-maxage=30\n"))
			g.Expect(api).To(ContainSubstring("mountPath: /var/log/audit"))
			g.Expect(api).To(ContainSubstring("path: /var/log/audit"))
			g.Expect(h.readManifest(t, "kube-controller-manager")).To(ContainSubstring("    - --node-monitor-grace-period=50s\n"))
			g.Expect(h.readManifest(t, "kube-scheduler")).NotTo(ContainSubstring("--"))
			img, err := h.manifestImage("kube-apiserver")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(img).To(Equal("registry.k8s.io/kube-apiserver:v1.35.2"))
		})
	}
}

// TestUpgradeFailsOnAnUnreadableKubeadmConfig: a ConfigMap without the
// ClusterConfiguration fails the upgrade, as it does kubeadm's, and no manifest changes.
func TestUpgradeFailsOnAnUnreadableKubeadmConfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, client := newHost(t, true)
	before := h.readManifest(t, "kube-apiserver")
	_, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
		Data:       map[string]string{"other": "x"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	k := &kube.Host{Root: h.Root, Runner: h.Runner(), Binaries: h, Etcd: h.Etcd()}
	g.Expect(k.ControlPlaneConfig(ctx, &protocol.NodePlan{Kubernetes: protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.35.2"}})).NotTo(Succeed())
	g.Expect(h.readManifest(t, "kube-apiserver")).To(Equal(before))
}

func (h *Host) readManifest(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(h.path("etc/kubernetes/manifests/" + name + ".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
