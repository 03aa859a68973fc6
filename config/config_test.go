package config_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/guard"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/singlenode"
	"github.com/capi-inplace/capi-inplace/internal/testenv"
)

// Names that tie the manifests together. They are repeated here on purpose: a rename
// in one manifest that forgets another must fail this test, not silently follow along.
const (
	namespace      = inplacev1.AgentNamespace // the extension lives in the same-named namespace
	serviceName    = "capi-inplace-webhook-service"
	certSecretName = "capi-inplace-webhook-service-cert"
	saName         = "capi-inplace-extension"
	deploymentName = "capi-inplace-extension"
	extConfigName  = "capi-inplace"
	certName       = "capi-inplace-serving-cert"
	issuerName     = "capi-inplace-selfsigned-issuer"
	imageUser      = int64(65532) // the extension image's user (hack/tools/images NonRootUser)
	admissionPort  = 9444         // the hold webhook's own port (--admission-port)
)

// certManagerVersion is the cert-manager release whose CRDs (deploy/crds in its Go
// module) the manifests are validated against. It is not a dependency of our module:
// the test fetches the module into the module cache with `go mod download`.
const certManagerVersion = "v1.21.2"

// render builds config/default with kustomize's Go API, exactly as `kubectl apply -k`.
func render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), "default")
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		// Through JSON, so that numbers are int64 as in objects read from an API server.
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("resource %s: %v", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatalf("resource %s: %v", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("rendered config/default has no %s %s", kind, name)
	return nil
}

// typed converts a rendered object into its Go type, strictly: an unknown field
// (a typo in the YAML) fails the conversion.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

func TestRenderedObjects(t *testing.T) {
	g := NewWithT(t)
	objs := render(t)

	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
		g.Expect(o.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/part-of", "capi-inplace"), o.GetName())
	}
	g.Expect(got).To(ConsistOf(
		"Namespace//"+namespace,
		"CustomResourceDefinition//fleetrollouts.inplace.capi-inplace.dev",
		"ConfigMap/"+namespace+"/capi-inplace-policy",
		"Deployment/"+namespace+"/"+deploymentName,
		"Service/"+namespace+"/"+serviceName,
		"ServiceAccount/"+namespace+"/"+saName,
		"ClusterRole//capi-inplace-system-extension",
		"ClusterRoleBinding//capi-inplace-system-extension",
		"Role/"+namespace+"/capi-inplace-leader-election",
		"RoleBinding/"+namespace+"/capi-inplace-leader-election",
		"Issuer/"+namespace+"/"+issuerName,
		"Certificate/"+namespace+"/"+certName,
		"ExtensionConfig//"+extConfigName,
		"MutatingWebhookConfiguration//capi-inplace-kubeadmcontrolplane-hold",
		"ValidatingWebhookConfiguration//capi-inplace-guard",
		"NetworkPolicy/"+namespace+"/capi-inplace-extension",
		"PodDisruptionBudget/"+namespace+"/"+deploymentName,
	))

	t.Run("ExtensionConfig points at the Service, takes its CA from the Certificate's Secret and selects namespaces", func(t *testing.T) {
		g := NewWithT(t)
		ec := find(t, objs, "ExtensionConfig", extConfigName)
		g.Expect(ec.GetAPIVersion()).To(Equal("runtime.cluster.x-k8s.io/v1beta2"))
		g.Expect(ec.GetAnnotations()).To(HaveKeyWithValue("runtime.cluster.x-k8s.io/inject-ca-from-secret", namespace+"/"+certSecretName))
		svc, _, _ := unstructured.NestedMap(ec.Object, "spec", "clientConfig", "service")
		g.Expect(svc).To(Equal(map[string]any{"namespace": namespace, "name": serviceName, "port": int64(443)}))
		g.Expect(unstructured.NestedFieldNoCopy(ec.Object, "spec", "clientConfig", "caBundle")).To(BeNil(), "the CA is injected, never hard-coded")
		exprs, found, _ := unstructured.NestedSlice(ec.Object, "spec", "namespaceSelector", "matchExpressions")
		g.Expect(found).To(BeTrue(), "a namespaceSelector is required: one in-place extension per namespace")
		g.Expect(exprs).To(Equal([]any{map[string]any{
			"key": inplacev1.NamespaceEnabledLabel, "operator": "In", "values": []any{"true"},
		}}))
		settings, found, _ := unstructured.NestedMap(ec.Object, "spec", "settings")
		g.Expect(found).To(BeTrue())
		g.Expect(settings).NotTo(HaveKey(inplacev1.SettingDisableInPlaceUpdates), "the default install must update in place")
	})

	t.Run("the Certificate's DNS names are the Service's and its Secret is the one mounted and injected", func(t *testing.T) {
		g := NewWithT(t)
		svc := typed[corev1.Service](t, find(t, objs, "Service", serviceName))
		cert := find(t, objs, "Certificate", certName)
		dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		g.Expect(dnsNames).To(ConsistOf(
			svc.Name+"."+svc.Namespace+".svc",
			svc.Name+"."+svc.Namespace+".svc.cluster.local",
		))
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		g.Expect(secretName).To(Equal(certSecretName))
		issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
		g.Expect(issuer).To(Equal(map[string]string{"kind": "Issuer", "name": issuerName}))
		_, selfSigned, _ := unstructured.NestedMap(find(t, objs, "Issuer", issuerName).Object, "spec", "selfSigned")
		g.Expect(selfSigned).To(BeTrue(), "a self-signed Issuer: the Secret's ca.crt is what CAPI injects")

		dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
		g.Expect(dep.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Secret.SecretName", certSecretName)))
		g.Expect(svc.Spec.Ports).To(HaveLen(2))
		g.Expect(svc.Spec.Ports[0].Port).To(Equal(int32(443)))
		g.Expect(svc.Spec.Ports[0].TargetPort.String()).To(Equal("webhook-server"))
		g.Expect(svc.Spec.Ports[1].Port).To(Equal(int32(admissionPort)))
		g.Expect(svc.Spec.Ports[1].TargetPort.String()).To(Equal("admission"))
		g.Expect(dep.Spec.Template.Labels).To(And(
			HaveKeyWithValue("app.kubernetes.io/name", svc.Spec.Selector["app.kubernetes.io/name"]),
			HaveKeyWithValue("app.kubernetes.io/component", svc.Spec.Selector["app.kubernetes.io/component"]),
		), "the Service must select the extension's pods")
	})

	t.Run("the single-node hold webhook is singlenode's registration, on the Service, with the Certificate's CA", func(t *testing.T) {
		g := NewWithT(t)
		u := find(t, objs, "MutatingWebhookConfiguration", "capi-inplace-kubeadmcontrolplane-hold")
		g.Expect(u.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", namespace+"/"+certName))
		mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, u)
		want := singlenode.MutatingWebhook(admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{
				Namespace: namespace, Name: serviceName, Path: ptr.To(singlenode.DefaultWebhookPath), Port: ptr.To[int32](admissionPort),
			},
		})
		// Narrower than the package's default: only namespaces opted in to capi-inplace.
		want.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: inplacev1.NamespaceEnabledLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"},
		}}}
		g.Expect(mwc.Webhooks).To(Equal([]admissionregistrationv1.MutatingWebhook{want}))
	})

	t.Run("the in-place-only guard is guard's registration, on the admission port, opted-in namespaces only", func(t *testing.T) {
		g := NewWithT(t)
		u := find(t, objs, "ValidatingWebhookConfiguration", "capi-inplace-guard")
		g.Expect(u.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", namespace+"/"+certName))
		vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, u)
		want := guard.ValidatingWebhook(admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{
				Namespace: namespace, Name: serviceName, Path: ptr.To(guard.WebhookPath), Port: ptr.To[int32](admissionPort),
			},
		})
		want.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: inplacev1.NamespaceEnabledLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"},
		}}}
		g.Expect(vwc.Webhooks).To(Equal([]admissionregistrationv1.ValidatingWebhook{want}))
	})

	t.Run("the Deployment runs the extension hardened, with probes and the documented flags", func(t *testing.T) {
		g := NewWithT(t)
		dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
		pod := dep.Spec.Template.Spec
		g.Expect(pod.ServiceAccountName).To(Equal(saName))
		g.Expect(pod.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
		g.Expect(pod.SecurityContext.RunAsUser).To(HaveValue(Equal(imageUser)))
		g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		g.Expect(pod.Containers).To(HaveLen(1))
		c := pod.Containers[0]
		g.Expect(c.Image).To(Equal("ghcr.io/capi-inplace/capi-inplace:dev"))
		g.Expect(c.Command).To(Equal([]string{"/capi-inplace"}))
		g.Expect(c.Args).To(Equal([]string{
			"extension",
			"--webhook-port=9443",
			"--admission-port=9444",
			"--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
			"--leader-elect",
			"--diagnostics-address=:8443",
			"--health-addr=:9440",
			"--policy-file=/etc/capi-inplace/policy.yaml",
			"--extension-config-name=" + extConfigName,
			"--agent-image=$(AGENT_IMAGE)",
		}))
		g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "AGENT_IMAGE", Value: "ghcr.io/capi-inplace/capi-inplace-agent:dev"}),
			"the agent runs its own image, set by the images transformer like the extension's")
		g.Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
		g.Expect(c.SecurityContext.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
		g.Expect(c.SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}))
		g.Expect(c.SecurityContext.Capabilities.Add).To(BeEmpty())
		g.Expect(c.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
		g.Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
		g.Expect(c.Resources.Requests).NotTo(BeEmpty())
		g.Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory))
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		g.Expect(ports).To(Equal(map[string]int32{"webhook-server": 9443, "admission": admissionPort, "metrics": 8443, "healthz": 9440}))
		g.Expect(c.VolumeMounts).To(ContainElements(
			And(HaveField("MountPath", "/tmp/k8s-webhook-server/serving-certs"), HaveField("ReadOnly", true)),
			HaveField("MountPath", "/etc/capi-inplace"),
		))

		cm := typed[corev1.ConfigMap](t, find(t, objs, "ConfigMap", "capi-inplace-policy"))
		g.Expect(cm.Data).To(HaveKey("policy.yaml"), "--policy-file names this key")
		pol, err := policy.Parse([]byte(cm.Data["policy.yaml"]))
		g.Expect(err).NotTo(HaveOccurred(), "the extension must be able to load the shipped policy")
		g.Expect(pol.Drain()).To(Equal(policy.Builtin().Drain()), "the shipped policy states the defaults")
		g.Expect(pol.AcceptBootstrapOnlyFields()).To(Equal(policy.Builtin().AcceptBootstrapOnlyFields()))
		g.Expect(pod.Volumes).To(ContainElement(HaveField("ConfigMap.Name", cm.Name)))
	})

	t.Run("highly available: two replicas, one kept by a PodDisruptionBudget, spread over nodes, one leader", func(t *testing.T) {
		g := NewWithT(t)
		dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
		g.Expect(dep.Spec.Replicas).To(HaveValue(Equal(int32(2))))
		pdb := typed[policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", deploymentName))
		g.Expect(pdb.Namespace).To(Equal(dep.Namespace))
		g.Expect(pdb.Spec.MinAvailable).To(HaveValue(Equal(intstr.FromInt32(1))))
		g.Expect(pdb.Spec.MaxUnavailable).To(BeNil())
		g.Expect(pdb.Spec.Selector.MatchLabels).NotTo(BeEmpty())
		g.Expect(pdb.Spec.Selector).To(Equal(dep.Spec.Selector), "the budget counts exactly the Deployment's pods")
		g.Expect(*dep.Spec.Replicas).To(BeNumerically(">", 1), "minAvailable 1 of one replica would block every node drain")

		// Preferred, not required: a one-node management cluster still runs both.
		aff := dep.Spec.Template.Spec.Affinity
		g.Expect(aff).NotTo(BeNil())
		g.Expect(aff.PodAntiAffinity).NotTo(BeNil())
		g.Expect(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution).To(BeEmpty())
		g.Expect(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution).To(HaveLen(1))
		term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
		g.Expect(term.TopologyKey).To(Equal(corev1.LabelHostname))
		sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(sel.Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue(), "the anti-affinity selects the extension's own pods")
		g.Expect(term.Namespaces).To(BeEmpty(), "the pod's own namespace")

		// The single-node controller writes KCPs, Machines and workload kubeadm-config:
		// only the leader runs it. The leader election Role is in the pod's namespace,
		// where the lease lives without --leader-elect-namespace.
		c := dep.Spec.Template.Spec.Containers[0]
		g.Expect(c.Args).To(ContainElement("--leader-elect"))
		g.Expect(c.Args).NotTo(ContainElement(HavePrefix("--leader-elect-namespace")))
		g.Expect(find(t, objs, "Role", "capi-inplace-leader-election").GetNamespace()).To(Equal(dep.Namespace))
	})

	t.Run("the NetworkPolicy admits only Cluster API's controllers to the hooks", func(t *testing.T) {
		g := NewWithT(t)
		np := typed[networkingv1.NetworkPolicy](t, find(t, objs, "NetworkPolicy", "capi-inplace-extension"))
		dep := typed[appsv1.Deployment](t, find(t, objs, "Deployment", deploymentName))
		g.Expect(np.Namespace).To(Equal(dep.Namespace))
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(np.Spec.PodSelector.MatchLabels).NotTo(BeEmpty())
		g.Expect(sel.Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue(), "selects the extension's pods")
		g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))

		// Every rule names its ports (no allow-all), and each port is one the pod serves.
		containerPorts := map[string]int32{}
		for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
			containerPorts[p.Name] = p.ContainerPort
		}
		sources := map[int32][]string{}
		for _, r := range np.Spec.Ingress {
			g.Expect(r.Ports).NotTo(BeEmpty(), "a rule without ports admits every port")
			for _, p := range r.Ports {
				g.Expect(p.Protocol).To(HaveValue(Equal(corev1.ProtocolTCP)))
				g.Expect(containerPorts).To(HaveKey(p.Port.String()), "port %s is a named port of the extension container", p.Port)
				port := containerPorts[p.Port.String()]
				if len(r.From) == 0 {
					sources[port] = append(sources[port], "anyone")
				}
				for _, f := range r.From {
					g.Expect(f.IPBlock).To(BeNil())
					g.Expect(f.NamespaceSelector).NotTo(BeNil(), "a pod selector alone would mean this namespace only")
					from := "namespace " + labels.Set(f.NamespaceSelector.MatchLabels).String()
					if f.PodSelector != nil {
						from += " pods " + labels.Set(f.PodSelector.MatchLabels).String()
					}
					g.Expect(f.NamespaceSelector.MatchExpressions).To(BeEmpty())
					sources[port] = append(sources[port], from)
				}
			}
		}
		g.Expect(sources).To(Equal(map[int32][]string{
			// The hooks: the core manager (Machine, MachineSet, topology controllers) and
			// KubeadmControlPlane's, as clusterctl installs and labels them.
			9443: {
				"namespace kubernetes.io/metadata.name=capi-system pods cluster.x-k8s.io/provider=cluster-api",
				"namespace kubernetes.io/metadata.name=capi-kubeadm-control-plane-system pods cluster.x-k8s.io/provider=control-plane-kubeadm",
			},
			// The API server's address is not portable; an admission answer matters only
			// to the API server that asked.
			admissionPort: {"anyone"},
			8443:          {"namespace metrics=enabled"},
		}))

		// The hooks are registered on the hooks port, the hold webhook on the admission port.
		svc := typed[corev1.Service](t, find(t, objs, "Service", serviceName))
		target := map[int32]string{}
		for _, p := range svc.Spec.Ports {
			target[p.Port] = p.TargetPort.String()
		}
		ec := find(t, objs, "ExtensionConfig", extConfigName)
		hookPort, _, _ := unstructured.NestedInt64(ec.Object, "spec", "clientConfig", "service", "port")
		g.Expect(target[int32(hookPort)]).To(Equal("webhook-server"))
		mwc := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, find(t, objs, "MutatingWebhookConfiguration", "capi-inplace-kubeadmcontrolplane-hold"))
		g.Expect(target[*mwc.Webhooks[0].ClientConfig.Service.Port]).To(Equal("admission"))
	})

	t.Run("RBAC grants exactly the documented allow-list", func(t *testing.T) {
		g := NewWithT(t)
		cr := typed[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "capi-inplace-system-extension"))
		g.Expect(grants(cr.Rules)).To(Equal(map[string][]string{
			"cluster.x-k8s.io/clusters":                                  {"get", "list", "patch", "watch"},
			"cluster.x-k8s.io/machinesets":                               {"get", "list", "watch"},
			"cluster.x-k8s.io/machinedeployments":                        {"get", "list", "patch", "watch"},
			"inplace.capi-inplace.dev/fleetrollouts":                     {"get", "list", "watch"},
			"inplace.capi-inplace.dev/fleetrollouts/status":              {"patch", "update"},
			"cluster.x-k8s.io/clusterclasses":                            {"get", "list", "watch"},
			"controlplane.cluster.x-k8s.io/kubeadmcontrolplanetemplates": {"get", "list", "watch"},
			"cluster.x-k8s.io/machinedrainrules":                         {"get", "list", "watch"},
			"cluster.x-k8s.io/machinehealthchecks":                       {"get", "list", "watch"},
			"cluster.x-k8s.io/machines":                                  {"get", "list", "patch", "update", "watch"},
			"cluster.x-k8s.io/machines/status":                           {"patch", "update"},
			"cluster.x-k8s.io/clusters/status":                           {"patch", "update"},
			"controlplane.cluster.x-k8s.io/kubeadmcontrolplanes":         {"get", "list", "patch", "update", "watch"},
			"controlplane.cluster.x-k8s.io/kubeadmcontrolplanes/status":  {"patch", "update"},
			"bootstrap.cluster.x-k8s.io/kubeadmconfigs":                  {"get", "list", "patch", "update", "watch"},
			"bootstrap.cluster.x-k8s.io/kubeadmconfigtemplates":          {"get", "list", "watch"},
			"infrastructure.cluster.x-k8s.io/*":                          {"get", "list", "patch", "update", "watch"},
			"/secrets":                                                   {"get", "list", "watch"},
			"apiextensions.k8s.io/customresourcedefinitions":             {"get", "list", "watch"},
			"runtime.cluster.x-k8s.io/extensionconfigs":                  {"get", "list", "watch"},
			// Only its own configuration (resourceNames): guard.Registrar.
			"admissionregistration.k8s.io/validatingwebhookconfigurations": {"get", "patch"},
			"/namespaces":                               {"get", "list", "watch"},
			"/events":                                   {"create", "patch"},
			"events.k8s.io/events":                      {"create", "patch"},
			"authentication.k8s.io/tokenreviews":        {"create"},
			"authorization.k8s.io/subjectaccessreviews": {"create"},
		}))
		role := typed[rbacv1.Role](t, find(t, objs, "Role", "capi-inplace-leader-election"))
		g.Expect(role.Namespace).To(Equal(namespace))
		g.Expect(grants(role.Rules)).To(Equal(map[string][]string{
			"coordination.k8s.io/leases": {"create", "delete", "get", "list", "patch", "update", "watch"},
		}))
		for _, r := range slices.Concat(cr.Rules, role.Rules) {
			g.Expect(r.Verbs).NotTo(ContainElement("*"), "no wildcard verbs")
			g.Expect(r.APIGroups).NotTo(ContainElement("*"), "no wildcard API groups")
			g.Expect(r.NonResourceURLs).To(BeEmpty())
			if slices.Contains(r.Resources, "*") {
				g.Expect(r.APIGroups).To(Equal([]string{"infrastructure.cluster.x-k8s.io"}), "a wildcard resource only for infrastructure providers' kinds")
			}
		}

		crb := typed[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", "capi-inplace-system-extension"))
		rb := typed[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", "capi-inplace-leader-election"))
		sa := rbacv1.Subject{Kind: "ServiceAccount", Name: saName, Namespace: namespace}
		g.Expect(crb.Subjects).To(Equal([]rbacv1.Subject{sa}))
		g.Expect(crb.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}))
		g.Expect(rb.Subjects).To(Equal([]rbacv1.Subject{sa}))
		g.Expect(rb.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}))
	})
}

// grants flattens rules into "group/resource" -> sorted verbs.
func grants(rules []rbacv1.PolicyRule) map[string][]string {
	m := map[string]sets.Set[string]{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				k := g + "/" + res
				if m[k] == nil {
					m[k] = sets.New[string]()
				}
				m[k].Insert(r.Verbs...)
			}
		}
	}
	out := map[string][]string{}
	for k, v := range m {
		out[k] = sets.List(v)
	}
	return out
}

// TestImageMatchesBuildAndManifests checks `make image` against the manifests and
// `make build` (hack/tools/images builds and tests the images themselves): the
// extension image runs /capi-inplace from ./cmd/capi-inplace as the non-root user the
// Deployment runs as, the agent image /capi-inplace-agent from ./cmd/capi-inplace-agent
// as root (with its etcd helper /capi-inplace-etcd and its CEL helper
// /capi-inplace-cel), and `make build` builds the same packages.
func TestImageMatchesBuildAndManifests(t *testing.T) {
	g := NewWithT(t)
	makefile, err := os.ReadFile("../Makefile")
	g.Expect(err).NotTo(HaveOccurred())
	tool, err := os.ReadFile("../hack/tools/images/build.go")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = os.Stat("../Dockerfile")
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no Dockerfile: images are built by make image without a Docker engine")

	image := regexp.MustCompile(`(?ms)^image:.*?\n\n`).Find(makefile)
	g.Expect(image).NotTo(BeNil(), "the Makefile's image target")
	g.Expect(string(image)).To(ContainSubstring("-image capi-inplace=./cmd/capi-inplace "))
	g.Expect(string(image)).To(ContainSubstring("-image capi-inplace-agent=./cmd/capi-inplace-agent,./cmd/capi-inplace-etcd,./cmd/capi-inplace-cel "), "the agent image carries its etcd and CEL helpers")
	g.Expect(string(image)).To(ContainSubstring("-root-image capi-inplace-agent"), "the agent alone runs as root")
	g.Expect(makefile).To(ContainSubstring("IMAGE_PLATFORMS ?= linux/amd64,linux/arm64"))
	g.Expect(string(tool)).To(ContainSubstring(fmt.Sprintf(`NonRootUser = "%d:%d"`, imageUser, imageUser)), "the image's user is the Deployment's runAsUser")
	g.Expect(string(tool)).To(ContainSubstring(`entrypoint := "/" + spec.Name`), "entrypoint /<image name>: /capi-inplace as the Deployment's command")
	for _, pkg := range []string{"capi-inplace", "capi-inplace-agent", "capi-inplace-etcd", "capi-inplace-cel"} {
		g.Expect(makefile).To(MatchRegexp(`(?m)^\tCGO_ENABLED=0 \$\(GO\) build .*-o \$\(BIN\)/`+pkg+` \./cmd/`+pkg+`$`), "make build builds %s static", pkg)
	}
	// Both real-node lanes build the agent's image with one recipe.
	recipe, err := os.ReadFile("../hack/realnode/agent-image.sh")
	g.Expect(err).NotTo(HaveOccurred())
	for _, target := range []string{"e2e-node", "e2e-real"} {
		lane := regexp.MustCompile(`(?ms)^` + target + `:.*?\n\n`).Find(makefile)
		g.Expect(lane).NotTo(BeNil(), "the Makefile's %s target", target)
		g.Expect(string(lane)).To(ContainSubstring("hack/realnode/agent-image.sh"), "%s builds the agent image with the lanes' recipe", target)
	}
	for _, bin := range []string{"capi-inplace-agent", "capi-inplace-etcd", "capi-inplace-cel"} {
		g.Expect(string(recipe)).To(ContainSubstring(`-file "$bin/`+bin+`=/`+bin+`"`), "the real-node lanes' agent image carries %s, as the release image does", bin)
		g.Expect(string(recipe)).To(MatchRegexp(`cat [^|]*"\$bin/`+bin+`"[ |]`), "the lanes' image tag hashes %s", bin)
	}
}

// TestManifestsApplyToAPIServer applies every rendered object with server-side apply in
// dry-run mode to a real kube-apiserver with Cluster API's and cert-manager's CRDs, so
// that schema validation (CRD OpenAPI, built-in types, RBAC) runs for real. It then
// creates the RBAC objects and asks the API server's authorizer what the extension's
// ServiceAccount can do.
func TestManifestsApplyToAPIServer(t *testing.T) {
	testenv.RequireAssets(t)
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	certManagerDir := moduleDir(t, "github.com/cert-manager/cert-manager", certManagerVersion)
	// CAPICore also holds runtime.cluster.x-k8s.io's ExtensionConfig.
	cfg := testenv.StartT(t, testenv.Options{
		CAPI:    []testenv.CRDSet{testenv.CAPICore, testenv.KubeadmControlPlane, testenv.KubeadmBootstrap},
		CRDDirs: []string{filepath.Join(certManagerDir, "deploy", "crds")},
	}).Config
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	g.Expect(err).NotTo(HaveOccurred())

	objs := render(t)
	// Cluster-scoped objects first, so that the namespace exists for the others.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return strings.Compare(a.GetNamespace(), b.GetNamespace())
	})
	for _, o := range objs {
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.DryRunAll, client.FieldOwner("capi-inplace-config-test"), client.ForceOwnership)
		g.Expect(err).NotTo(HaveOccurred(), "server-side dry-run apply of %s %s", o.GetKind(), o.GetName())
		if o.GetKind() == "Namespace" {
			g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("capi-inplace-config-test"))).To(Succeed())
		}
	}
	// Dry run really is dry: nothing but the namespace was stored.
	err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: deploymentName}, &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "dry run stored the Deployment: %v", err)

	// A broken object must be refused, or the loop above proves nothing.
	bad := find(t, objs, "ExtensionConfig", extConfigName).DeepCopy()
	g.Expect(unstructured.SetNestedField(bad.Object, int64(443), "spec", "clientConfig", "service", "name")).To(Succeed())
	err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(bad), client.DryRunAll, client.FieldOwner("capi-inplace-config-test"))
	g.Expect(err).To(HaveOccurred(), "the API server validates ExtensionConfig against its CRD schema")
	badCert := find(t, objs, "Certificate", certName).DeepCopy()
	g.Expect(unstructured.SetNestedField(badCert.Object, "not-a-list", "spec", "dnsNames")).To(Succeed())
	err = c.Apply(ctx, client.ApplyConfigurationFromUnstructured(badCert), client.DryRunAll, client.FieldOwner("capi-inplace-config-test"))
	g.Expect(err).To(HaveOccurred(), "the API server validates Certificate against cert-manager's CRD schema")

	// Create the RBAC objects for real and ask the authorizer.
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("capi-inplace-config-test"))).To(Succeed())
		}
	}
	type access struct {
		ns, verb, group, resource, sub string
	}
	allowed := []access{
		{"default", "list", "cluster.x-k8s.io", "clusters", ""},
		{"default", "patch", "cluster.x-k8s.io", "clusters", ""},
		{"default", "watch", "cluster.x-k8s.io", "machinedeployments", ""},
		{"default", "patch", "cluster.x-k8s.io", "machinedeployments", ""},
		{"", "list", "inplace.capi-inplace.dev", "fleetrollouts", ""},
		{"", "patch", "inplace.capi-inplace.dev", "fleetrollouts", "status"},
		{"default", "patch", "cluster.x-k8s.io", "machines", ""},
		{"default", "patch", "cluster.x-k8s.io", "machines", "status"},
		{"default", "patch", "controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes", ""},
		{"default", "patch", "controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes", "status"},
		{"default", "patch", "bootstrap.cluster.x-k8s.io", "kubeadmconfigs", ""},
		{"default", "get", "bootstrap.cluster.x-k8s.io", "kubeadmconfigtemplates", ""},
		{"default", "patch", "infrastructure.cluster.x-k8s.io", "devmachines", ""},
		{"default", "get", "", "secrets", ""},
		{"default", "create", "", "events", ""},
		{"default", "create", "events.k8s.io", "events", ""},
		{namespace, "update", "coordination.k8s.io", "leases", ""},
		{"", "create", "authentication.k8s.io", "tokenreviews", ""},
		{"", "create", "authorization.k8s.io", "subjectaccessreviews", ""},
	}
	denied := []access{
		{"default", "create", "cluster.x-k8s.io", "machines", ""},
		{"default", "delete", "cluster.x-k8s.io", "machines", ""},
		{"default", "delete", "cluster.x-k8s.io", "clusters", ""},
		{"default", "delete", "cluster.x-k8s.io", "machinedeployments", ""},
		{"", "patch", "inplace.capi-inplace.dev", "fleetrollouts", ""},
		{"default", "patch", "bootstrap.cluster.x-k8s.io", "kubeadmconfigtemplates", ""},
		{"default", "delete", "infrastructure.cluster.x-k8s.io", "devmachines", ""},
		{"default", "create", "", "secrets", ""},
		{"default", "patch", "", "secrets", ""},
		{"default", "delete", "", "secrets", ""},
		{"default", "create", "", "pods", ""},
		{"", "list", "", "nodes", ""},
		{"default", "update", "coordination.k8s.io", "leases", ""},
		{"", "bind", "rbac.authorization.k8s.io", "clusterroles", ""},
		{"", "escalate", "rbac.authorization.k8s.io", "clusterroles", ""},
		{"", "create", "rbac.authorization.k8s.io", "clusterrolebindings", ""},
		{"", "create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", ""},
	}
	can := func(a access) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + namespace + ":" + saName,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub,
			},
		}}
		if err := c.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	// The authorizer reads RBAC from an informer: wait until the grants are visible.
	for _, a := range allowed {
		g.Eventually(func() (bool, error) { return can(a) }).WithTimeout(30*time.Second).
			Should(BeTrue(), "the extension must be able to %+v", a)
	}
	for _, a := range denied {
		g.Expect(can(a)).To(BeFalse(), "the extension must not be able to %+v", a)
	}
}

// moduleDir returns a module's directory in the module cache. With no version it is
// the version our go.mod selects; with a version the module is downloaded (once) with
// `go mod download`, outside our module so that go.mod and go.sum stay untouched.
func moduleDir(t *testing.T, path, version string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to locate %s in the module cache: %v", path, err)
	}
	var cmd *exec.Cmd
	if version == "" {
		cmd = exec.Command(goBin, "list", "-m", "-json", path)
	} else {
		cmd = exec.Command(goBin, "mod", "download", "-json", path+"@"+version)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, stderr.String())
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: decode: %v", strings.Join(cmd.Args, " "), err)
	}
	if m.Dir == "" {
		t.Fatalf("%s: no directory (%s)", strings.Join(cmd.Args, " "), m.Error)
	}
	return m.Dir
}
