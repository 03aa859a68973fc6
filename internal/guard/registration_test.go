package guard_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

func crdMeta(name string, labels map[string]string) metav1.PartialObjectMetadata {
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// TestInfraTemplates: the infrastructure machine templates are found by Cluster
// API's contract labels, at the version Cluster API reads.
func TestInfraTemplates(t *testing.T) {
	g := NewWithT(t)
	deleting := crdMeta("gonemachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta2": "v1beta2"})
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	got := guard.InfraTemplates([]metav1.PartialObjectMetadata{
		crdMeta("dockermachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1", "cluster.x-k8s.io/v1beta2": "v1beta2"}),
		crdMeta("awsmachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta1": "v1beta1_v1beta2"}),
		crdMeta("acmemachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta2": "v1alpha1_v1beta1_v1alpha2"}),
		crdMeta("oldmachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1alpha4": "v1alpha4"}),
		crdMeta("nolabelmachinetemplates.infrastructure.cluster.x-k8s.io", nil),
		crdMeta("emptymachinetemplates.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta2": ""}),
		crdMeta("dockermachines.infrastructure.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta2": "v1beta2"}),
		crdMeta("othermachinetemplates.infrastructure.example.com", map[string]string{"cluster.x-k8s.io/v1beta2": "v1beta2"}),
		crdMeta("kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io", map[string]string{"cluster.x-k8s.io/v1beta2": "v1beta2"}),
		deleting,
	})
	g.Expect(got).To(Equal([]guard.InfraTemplate{
		{Version: "v1beta1", Resource: "acmemachinetemplates"},
		{Version: "v1beta2", Resource: "awsmachinetemplates"},
		{Version: "v1beta2", Resource: "dockermachinetemplates"},
	}))

	rules := guard.Rules(got)
	infra := rules[len(rules)-2:]
	g.Expect(infra[0].APIGroups).To(Equal([]string{guard.InfraGroup}))
	g.Expect(infra[0].APIVersions).To(Equal([]string{"v1beta1"}))
	g.Expect(infra[0].Resources).To(Equal([]string{"acmemachinetemplates"}))
	g.Expect(infra[1].APIVersions).To(Equal([]string{"v1beta2"}))
	g.Expect(infra[1].Resources).To(Equal([]string{"awsmachinetemplates", "dockermachinetemplates"}))
	g.Expect(infra[1].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}))
	g.Expect(guard.Rules(nil)).To(HaveLen(4), "no infrastructure rule without a template")
}

// TestRegistrarFollowsInstalledProviders: a third provider's machine template CRD
// installed with Cluster API's contract label is added to the guard's registration
// (at the version its label names for the contract), without a hand edit; one
// without the label is not; a removed provider goes. Before, the registration named
// the Docker and Dev providers' templates only, whatever was installed.
func TestRegistrarFollowsInstalledProviders(t *testing.T) {
	testenv.RequireAssets(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	hook := guard.ValidatingWebhook(admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1" + guard.WebhookPath)})
	hook.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	te := testenv.StartT(t, testenv.Options{
		CAPI:           []testenv.CRDSet{testenv.CAPICore, testenv.DockerInfra},
		ContractLabels: true,
	})
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	admin, err := client.New(te.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(admin.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: guard.ConfigurationName},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{hook},
	})).To(Succeed())

	mgr, err := ctrl.NewManager(te.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&guard.Registrar{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr)).To(Succeed())
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { stop(); <-done })

	infraRules := func(g Gomega) map[string][]string {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		g.Expect(admin.Get(ctx, client.ObjectKey{Name: guard.ConfigurationName}, vwc)).To(Succeed())
		g.Expect(vwc.Webhooks).To(HaveLen(1))
		out := map[string][]string{}
		for _, r := range vwc.Webhooks[0].Rules {
			if r.APIGroups[0] == guard.InfraGroup {
				out[r.APIVersions[0]] = append(out[r.APIVersions[0]], r.Resources...)
			}
		}
		return out
	}
	// CAPD's CRDs (Docker and Dev templates), as installed.
	capd := []string{"devmachinetemplates", "dockermachinetemplates"}
	g.Eventually(infraRules, 30*time.Second, 200*time.Millisecond).Should(Equal(map[string][]string{"v1beta2": capd}))

	acme := templateCRD("acme", map[string]string{"cluster.x-k8s.io/v1beta2": "v1alpha1_v1beta1"})
	unlabelled := templateCRD("unlabelled", nil)
	g.Expect(admin.Create(ctx, acme)).To(Succeed())
	g.Expect(admin.Create(ctx, unlabelled)).To(Succeed())
	g.Eventually(infraRules, 30*time.Second, 200*time.Millisecond).Should(Equal(map[string][]string{
		"v1beta1": {"acmemachinetemplates"}, "v1beta2": capd,
	}))

	g.Expect(admin.Delete(ctx, acme)).To(Succeed())
	g.Eventually(infraRules, 30*time.Second, 200*time.Millisecond).Should(Equal(map[string][]string{"v1beta2": capd}))
}

// templateCRD is a provider's machine template CRD, serving v1alpha1 and v1beta1.
func templateCRD(provider string, labels map[string]string) *apiextensionsv1.CustomResourceDefinition {
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object", XPreserveUnknownFields: ptr.To(true),
	}}
	kind := map[string]string{"acme": "Acme", "unlabelled": "Unlabelled"}[provider] + "MachineTemplate"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: provider + "machinetemplates." + guard.InfraGroup, Labels: labels},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: guard.InfraGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: provider + "machinetemplates", Singular: provider + "machinetemplate", Kind: kind, ListKind: kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1alpha1", Served: true, Storage: false, Schema: schema},
				{Name: "v1beta1", Served: true, Storage: true, Schema: schema},
			},
		},
	}
}
