package coordinator

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// workloadKind is a built-in kind the coordinator reads or writes in workload
// clusters, with its resource and scope as the Kubernetes API defines them.
type workloadKind struct {
	gvk        schema.GroupVersionKind
	resource   string
	namespaced bool
}

// workloadKinds are mapped without discovery (workloadRESTMapper).
// TestWorkloadKindsMatchDiscovery checks every entry against a real API server.
var workloadKinds = []workloadKind{
	{corev1.SchemeGroupVersion.WithKind("Node"), "nodes", false},
	{corev1.SchemeGroupVersion.WithKind("Namespace"), "namespaces", false},
	{corev1.SchemeGroupVersion.WithKind("PersistentVolume"), "persistentvolumes", false},
	{corev1.SchemeGroupVersion.WithKind("Secret"), "secrets", true},
	{corev1.SchemeGroupVersion.WithKind("ConfigMap"), "configmaps", true},
	{corev1.SchemeGroupVersion.WithKind("Pod"), "pods", true},
	{corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), "persistentvolumeclaims", true},
	{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), "serviceaccounts", true},
	{corev1.SchemeGroupVersion.WithKind("Event"), "events", true},
	{appsv1.SchemeGroupVersion.WithKind("DaemonSet"), "daemonsets", true},
	{policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), "poddisruptionbudgets", true},
	{eventsv1.SchemeGroupVersion.WithKind("Event"), "events", true},
	{coordinationv1.SchemeGroupVersion.WithKind("Lease"), "leases", true},
	{rbacv1.SchemeGroupVersion.WithKind("Role"), "roles", true},
	{rbacv1.SchemeGroupVersion.WithKind("RoleBinding"), "rolebindings", true},
	{rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), "clusterroles", false},
	{rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"), "clusterrolebindings", false},
	{storagev1.SchemeGroupVersion.WithKind("VolumeAttachment"), "volumeattachments", false},
	{admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"), "validatingadmissionpolicies", false},
	{admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"), "validatingadmissionpolicybindings", false},
}

// staticWorkloadMapper maps workloadKinds; built once, read-only after.
var staticWorkloadMapper = sync.OnceValue(func() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range workloadKinds {
		scope := meta.RESTScopeRoot
		if k.namespaced {
			scope = meta.RESTScopeNamespace
		}
		gv := k.gvk.GroupVersion()
		m.AddSpecific(k.gvk, gv.WithResource(k.resource), gv.WithResource(strings.ToLower(k.gvk.Kind)), scope)
	}
	return m
})

// workloadRESTMapper maps the kinds of a workload cluster's client: workloadKinds
// without a request, anything else by the cluster's discovery, loaded on first
// need. controller-runtime's dynamic mapper alone loads the cluster's whole
// discovery (every group and custom resource, in one aggregated response) at its
// first lookup and keeps it as long as the client: about 340 KiB per cluster
// against envtest's API server with Cluster API's CRDs, 17 MiB of the extension's
// heap at 50 clusters (make bench, scale section, heap profile).
func workloadRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("workload REST mapper: %w", err)
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{staticWorkloadMapper(), dynamic}}, nil
}
