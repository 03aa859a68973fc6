package guard_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/preview/previewtest"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// TestWebhooksDownLetTheWaysOut: with the guard and the hold webhook registered
// (failurePolicy Fail, the registrations of config/webhook) and the extension down
// (nothing serves them), the API server still admits the writes neither webhook
// would refuse or change: Cluster API's remediation and pause, the guard=disabled
// and paused escape hatches, a MachineSet scaled, finalizers removed at deletion.
// A spec change, a MachineSet's deletion and a held KubeadmControlPlane's write
// are still refused.
func TestWebhooksDownLetTheWaysOut(t *testing.T) {
	testenv.RequireAssets(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	optedIn := &metav1.LabelSelector{MatchLabels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}
	svc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "capi-inplace-system", Name: "capi-inplace", Path: ptr.To(path)}}
	}
	guardHook := guard.ValidatingWebhook(svc(guard.WebhookPath))
	guardHook.NamespaceSelector = optedIn
	holdHook := singlenode.MutatingWebhook(svc(singlenode.DefaultWebhookPath))
	holdHook.NamespaceSelector = optedIn
	// envtest points both at its local serving port, where nothing listens.
	te := testenv.StartT(t, testenv.Options{
		CAPI:           []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane, testenv.KubeadmBootstrap, testenv.DockerInfra},
		ContractLabels: true,
		Webhooks: envtest.WebhookInstallOptions{
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{{ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-guard"}, Webhooks: []admissionregistrationv1.ValidatingWebhook{guardHook}}},
			MutatingWebhooks:   []*admissionregistrationv1.MutatingWebhookConfiguration{{ObjectMeta: metav1.ObjectMeta{Name: "capi-inplace-kubeadmcontrolplane-hold"}, Webhooks: []admissionregistrationv1.MutatingWebhook{holdHook}}},
		},
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme, apiextensionsv1.AddToScheme} {
		g.Expect(add(scheme)).To(Succeed())
	}
	c, err := client.New(te.Config, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	fx := previewtest.Default()
	fx.Namespace, fx.Topology = "down", false
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fx.Namespace, Labels: map[string]string{inplacev1.NamespaceEnabledLabel: "true"}}})).To(Succeed())
	createFixture(ctx, t, c, fx)

	patch := func(obj client.Object, body map[string]any) error {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		obj.SetNamespace(fx.Namespace)
		return c.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", b))
	}
	annotate := func(k, v string) map[string]any {
		var value any
		if v != "" {
			value = v
		}
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: value}}}
	}
	cluster := func() client.Object { return &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: fx.Cluster}} }
	kcp := func() client.Object {
		return &controlplanev1.KubeadmControlPlane{ObjectMeta: metav1.ObjectMeta{Name: fx.KCPName()}}
	}
	md := func() client.Object {
		return &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: fx.MDName()}}
	}
	ms := func() client.Object { return &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Name: fx.MSName()}} }
	const down = "failed calling webhook"

	// The webhook configurations are loaded asynchronously: wait until a spec change
	// is refused.
	g.Eventually(func() error {
		return patch(md(), map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"version": "v1.35.9"}}}})
	}, 20*time.Second, 250*time.Millisecond).Should(MatchError(ContainSubstring(down)))

	tests := []struct {
		name    string
		obj     client.Object
		body    map[string]any
		refused bool
	}{
		{"turn the guard off", cluster(), annotate(inplacev1.GuardAnnotation, inplacev1.GuardDisabled), false},
		{"pause in-place updates", cluster(), annotate(inplacev1.PausedAnnotation, "true"), false},
		{"Cluster API's pause of the Cluster (clusterctl move)", cluster(), map[string]any{"spec": map[string]any{"paused": true}}, false},
		{"KCP remediation's annotation", kcp(), annotate(controlplanev1.RemediationInProgressAnnotation, "{}"), false},
		{"an operator pauses the KubeadmControlPlane", kcp(), annotate(clusterv1.PausedAnnotation, ""), false},
		{"a MachineDeployment scales its MachineSet", ms(), map[string]any{"spec": map[string]any{"replicas": 3}}, false},
		{"a MachineDeployment's spec", md(), map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"version": "v1.35.9"}}}}, true},
		{"a KubeadmControlPlane's version", kcp(), map[string]any{"spec": map[string]any{"version": "v1.35.9"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := patch(tt.obj, tt.body)
			if tt.refused {
				g.Expect(err).To(MatchError(ContainSubstring(down)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}

	t.Run("finalizers removed at deletion", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(patch(md(), map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/wait"}}})).To(Succeed())
		g.Expect(c.Delete(ctx, &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: fx.Namespace, Name: fx.MDName()}})).To(Succeed())
		g.Expect(patch(md(), map[string]any{"metadata": map[string]any{"finalizers": nil}})).To(Succeed())
	})
	t.Run("a MachineSet's deletion is still judged", func(t *testing.T) {
		g := NewWithT(t)
		err := c.Delete(ctx, &clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: fx.Namespace, Name: fx.MSName()}})
		g.Expect(err).To(MatchError(ContainSubstring(down)))
	})
	t.Run("a held KubeadmControlPlane keeps its hold", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(patch(kcp(), annotate(inplacev1.HoldAnnotation, "target"))).To(Succeed(), "adding the annotation changes nothing the webhook decides")
		g.Expect(patch(kcp(), annotate(inplacev1.HoldAnnotation, ""))).To(MatchError(ContainSubstring(down)), "removing it is the webhook's to decide")
	})
}
