package coordinator

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// The static entries are what a real API server's discovery says of each kind.
func TestWorkloadKindsMatchDiscovery(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	hc, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	discovered, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	g.Expect(err).NotTo(HaveOccurred())
	mapper, err := workloadRESTMapper(cfg, hc)
	g.Expect(err).NotTo(HaveOccurred())
	for _, k := range workloadKinds {
		want, err := discovered.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
		g.Expect(err).NotTo(HaveOccurred(), "%s is served by the API server", k.gvk)
		got, err := staticWorkloadMapper().RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
		g.Expect(err).NotTo(HaveOccurred(), "%s is mapped statically", k.gvk)
		g.Expect(got.Resource).To(Equal(want.Resource), "%s", k.gvk)
		g.Expect(got.Scope.Name()).To(Equal(want.Scope.Name()), "%s", k.gvk)
		viaClient, err := mapper.RESTMapping(k.gvk.GroupKind())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(viaClient.Resource).To(Equal(want.Resource), "%s without a version", k.gvk)
	}
}

// A kind outside the static entries is mapped by the cluster's discovery.
func TestWorkloadMapperFallsBackToDiscovery(t *testing.T) {
	g := NewWithT(t)
	cfg := testEnv.Require(t)
	hc, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	mapper, err := workloadRESTMapper(cfg, hc)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = staticWorkloadMapper().RESTMapping(clusterv1.GroupVersion.WithKind("Machine").GroupKind())
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "Machine is not a static entry: %v", err)
	m, err := mapper.RESTMapping(clusterv1.GroupVersion.WithKind("Machine").GroupKind(), clusterv1.GroupVersion.Version)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.Resource.Resource).To(Equal("machines"))
	g.Expect(m.Scope.Name()).To(Equal(meta.RESTScopeNameNamespace))
	_, err = mapper.RESTMapping(clusterv1.GroupVersion.WithKind("NoSuchKind").GroupKind())
	g.Expect(meta.IsNoMatchError(err)).To(BeTrue(), "an unknown kind is a no-match error: %v", err)
}
