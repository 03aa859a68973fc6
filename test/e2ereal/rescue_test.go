//go:build e2ereal

package e2ereal

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// refusedArg is an API server argument kube-apiserver does not know: with it the
// new API server exits at start, every time.
const refusedArg = "capi-inplace-lane-refused"

// TestSingleNodeAPIServerNotBackAfterPowerCut: a single control plane loses power
// while its update has written an API server manifest that cannot start (an
// argument kube-apiserver refuses). After the reboot the kubelet runs only static
// pods, so no DaemonSet agent comes back: the agent's rescue static pod waits for
// the node's API server, gives up at its deadline and rolls the update back from the
// journal. The old API server starts, the agent returns and reports the rollback,
// the KubeadmControlPlane stays held, and nothing was replaced or lost.
func TestSingleNodeAPIServerNotBackAfterPowerCut(t *testing.T) {
	// The scenarios run at once, each on clusters of its own: CI time.
	t.Parallel()
	g := newG(t)
	ctx := suite.ctx
	const ns, name = "real-rescue", "rescue"
	createCluster(t, clusterSpec{Namespace: ns, Name: name, Version: from, ControlPlanes: 1, SingleNode: true})
	machine := waitMachinesRunning(t, ns, name, 1)[0]
	node := machine.Status.NodeRef.Name
	wc, err := workloadClient(ctx, ns, name)
	g.Expect(err).NotTo(HaveOccurred())
	waitControlPlaneHealthy(t, ns, name)
	machines := watchMachines(t, ns)
	const manifest = "/etc/kubernetes/manifests/kube-apiserver.yaml"
	manifestBefore := mustNodeExec(t, node, "sha256sum", manifest)
	kept, err := wc.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before-the-update"}, Data: map[string]string{"kept": "yes"},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// The power goes once the API server's manifest carries the argument, whichever
	// action wrote it.
	powerCut := powerCutDuring(ctx, node, "", func(ctx context.Context) bool {
		_, err := nodeExec(ctx, node, "grep", "-q", "--", "--"+refusedArg, manifest)
		return err == nil
	})
	kcp := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, kcp)).To(Succeed())
	base := kcp.DeepCopy()
	kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs = append(kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs,
		bootstrapv1.Arg{Name: refusedArg, Value: ptr.To("1")})
	start := time.Now()
	g.Expect(suite.stack.Client.Patch(ctx, kcp, client.MergeFrom(base))).To(Succeed())

	select {
	case err := <-powerCut:
		g.Expect(err).NotTo(HaveOccurred(), "the power cut")
	case <-time.After(15 * time.Minute):
		t.Fatal("the node's API server manifest never carried the argument: no power cut")
	}
	cutAt := time.Now()
	suite.figures.Add("rescue: write (an argument the new API server refuses) -> power cut with the manifest written", cutAt.Sub(start))

	g.Eventually(func() error { return nodeRolledBack(ctx, wc, node) }, 25*time.Minute).Should(Succeed())
	g.Eventually(func() error { return kcpRolledBack(ctx, ns, name) }, 2*time.Minute).Should(Succeed())
	suite.figures.Add("rescue: power cut -> rolled back by the rescue pod (its API server deadline included), failure recorded on the Machine", time.Since(cutAt))

	// Rolled back by the rescue: the reason says the API server did not come back.
	n, err := wc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	st, err := protocol.DecodeStatus(n.Annotations[inplacev1.StatusAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Reason).To(Equal(state.ReasonAPIServerNotBack))
	// On the node: the manifest byte for byte the one before, the running API
	// server without the argument, no rescue pod left.
	g.Expect(mustNodeExec(t, node, "sha256sum", manifest)).To(Equal(manifestBefore))
	_, err = nodeExec(ctx, node, "test", "!", "-e", "/etc/kubernetes/manifests/capi-inplace-rescue.yaml")
	g.Expect(err).NotTo(HaveOccurred(), "the rescue static pod is still on the node")
	g.Eventually(func() error {
		// The pattern's last letter in brackets: grep's own command line does not match.
		pattern := "--" + refusedArg[:len(refusedArg)-1] + "[" + refusedArg[len(refusedArg)-1:] + "]"
		_, err := nodeExec(ctx, node, "sh", "-c", "! grep -q -- '"+pattern+"' /proc/[0-9]*/cmdline 2>/dev/null")
		return err
	}, 2*time.Minute).Should(Succeed(), "a process runs with the refused argument")
	// etcd's data as it was: a configuration change restores no snapshot.
	got, err := wc.CoreV1().ConfigMaps("default").Get(ctx, kept.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Data).To(Equal(kept.Data))
	// KCP stays held rather than replace the outdated Machine; nothing replaced.
	held := &controlplanev1.KubeadmControlPlane{}
	g.Expect(suite.stack.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, held)).To(Succeed())
	g.Expect(held.Annotations).To(HaveKey(clusterv1.PausedAnnotation), "KCP released with an outdated Machine")
	added, deleted := machines.result()
	g.Expect(added).To(BeEmpty(), "no Machine created")
	g.Expect(deleted).To(BeEmpty(), "no Machine deleted")
	g.Expect(waitMachinesRunning(t, ns, name, 1)[0].UID).To(Equal(machine.UID))
}
