package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func kubeconfigFor(t *testing.T, cfg *rest.Config, contextName string) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[contextName] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = contextName
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestKubeconfigClusters: clients come from CAPI's <cluster>-kubeconfig Secret, are
// cached while the kubeconfig is unchanged, and rebuilt after a rotation or Invalidate.
func TestKubeconfigClusters(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	cfg := testEnv.Require(t)
	key := client.ObjectKey{Namespace: f.ns, Name: "c1"}

	kc, err := NewKubeconfigClusters(f.mgmt, f.scheme, 0)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = kc.Get(f.ctx, key)
	g.Expect(err).To(MatchError(ContainSubstring("read kubeconfig of cluster " + key.String())))

	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "c1-kubeconfig"},
		Data:       map[string][]byte{"value": kubeconfigFor(t, cfg, "one")},
	}
	g.Expect(f.mgmt.Create(f.ctx, sec)).To(Succeed())

	first, err := kc.Get(f.ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Client.List(f.ctx, &corev1.NodeList{})).To(Succeed(), "the client really reaches the cluster")
	again, err := kc.Get(f.ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(first), "cached")

	kc.Invalidate(key)
	afterInvalidate, err := kc.Get(f.ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(afterInvalidate).NotTo(BeIdenticalTo(first))

	sec.Data["value"] = kubeconfigFor(t, cfg, "rotated")
	g.Expect(f.mgmt.Update(f.ctx, sec)).To(Succeed())
	rotated, err := kc.Get(f.ctx, key)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rotated).NotTo(BeIdenticalTo(afterInvalidate), "a new kubeconfig builds a new client")
}
