package guard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	k8sversion "k8s.io/apimachinery/pkg/version"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ConfigurationName is the ValidatingWebhookConfiguration that registers the guard
// (config/webhook).
const ConfigurationName = "capi-inplace-guard"

// InfraGroup is the API group of Cluster API's infrastructure providers, the one
// the extension may read (config/rbac) and the guard registers for.
const InfraGroup = "infrastructure.cluster.x-k8s.io"

// InfraTemplate is an infrastructure machine template resource and the version
// the guard is registered for.
type InfraTemplate struct {
	Version, Resource string
}

// defaultInfraTemplates are the static registration's (config/webhook): the Docker
// and Dev providers the e2e and bench stacks run.
var defaultInfraTemplates = []InfraTemplate{{"v1beta2", "dockermachinetemplates"}, {"v1beta2", "devmachinetemplates"}}

// contractVersions are the contracts this Cluster API speaks, newest first: its own
// and the one it still accepts (Cluster API's internal/contract.GetCompatibleVersions).
var contractVersions = []string{clusterv1.GroupVersion.Version, "v1beta1"}

// InfraTemplates returns the infrastructure machine templates among CRDs (their
// metadata), found as Cluster API finds a provider's types: a CRD named
// <plural>.infrastructure.cluster.x-k8s.io whose plural ends in "machinetemplates"
// and that carries the contract label cluster.x-k8s.io/<contract> for a contract
// this Cluster API speaks, its value the CRD's versions for that contract
// ("v1beta1_v1beta2"). The version is the newest listed for the newest contract, the
// one Cluster API reads (internal/contract.GetLatestContractAndAPIVersionFromContract);
// with matchPolicy Equivalent writes of the other versions reach the guard converted
// to it. A CRD being deleted is left out. Sorted by version and resource. Pure.
func InfraTemplates(crds []metav1.PartialObjectMetadata) []InfraTemplate {
	var out []InfraTemplate
	for _, crd := range crds {
		plural, group, ok := strings.Cut(crd.Name, ".")
		if !ok || group != InfraGroup || !strings.HasSuffix(plural, "machinetemplates") || crd.DeletionTimestamp != nil {
			continue
		}
		if v := contractAPIVersion(crd.Labels); v != "" {
			out = append(out, InfraTemplate{Version: v, Resource: plural})
		}
	}
	slices.SortFunc(out, func(a, b InfraTemplate) int {
		if c := strings.Compare(a.Version, b.Version); c != 0 {
			return c
		}
		return strings.Compare(a.Resource, b.Resource)
	})
	return out
}

// contractAPIVersion is the newest version a CRD's contract labels list for the
// newest contract this Cluster API speaks; "" when it has none.
func contractAPIVersion(labels map[string]string) string {
	for _, contract := range contractVersions {
		var newest string
		for _, v := range strings.Split(labels[clusterv1.GroupVersion.Group+"/"+contract], "_") {
			if v != "" && (newest == "" || k8sversion.CompareKubeAwareVersionStrings(v, newest) > 0) {
				newest = v
			}
		}
		if newest != "" {
			return newest
		}
	}
	return ""
}

// registrarResync is how often the Registrar checks the configuration without a
// CRD event: a re-applied manifest (clusterctl upgrade, kubectl apply -k) brings the
// static rules back.
const registrarResync = 10 * time.Minute

// Registrar keeps the guard's rules (webhook WebhookName of the
// ValidatingWebhookConfiguration Name) equal to Rules of the infrastructure machine
// templates installed (InfraTemplates), so that a provider installed, upgraded or
// removed later (clusterctl init, upgrade, delete) is guarded without a hand edit,
// which clusterctl upgrade would revert. It reads CRD metadata only and writes only
// that configuration's rules; a configuration that does not exist (the guard not
// deployed) is left alone.
type Registrar struct {
	// Client lists CRD metadata (the manager's cache) and patches the configuration.
	Client client.Client
	// Reader reads the configuration without a cache (no informer, no list or watch
	// permission on every configuration).
	Reader client.Reader
	// Name is the configuration; ConfigurationName when empty.
	Name string
}

// SetupWithManager runs the Registrar on mgr: on every change of an infrastructure
// template CRD, at start and every registrarResync.
func (r *Registrar) SetupWithManager(mgr ctrl.Manager) error {
	if r.Name == "" {
		r.Name = ConfigurationName
	}
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	templates := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return strings.HasSuffix(o.GetName(), "machinetemplates."+InfraGroup)
	})
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: r.Name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("capi-inplace-guard-registration").
		WatchesMetadata(crd, one, builder.WithPredicates(templates)).
		Complete(r)
}

// Reconcile implements reconcile.Reconciler.
func (r *Registrar) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	name := r.Name
	if name == "" {
		name = ConfigurationName
	}
	crds := &metav1.PartialObjectMetadataList{}
	crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinitionList"))
	if err := r.Client.List(ctx, crds); err != nil {
		return reconcile.Result{}, fmt.Errorf("list CustomResourceDefinitions: %w", err)
	}
	infra := InfraTemplates(crds.Items)
	want := Rules(infra)

	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: name}, vwc); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{RequeueAfter: registrarResync}, nil
		}
		return reconcile.Result{}, fmt.Errorf("read ValidatingWebhookConfiguration %s: %w", name, err)
	}
	orig := vwc.DeepCopy()
	changed := false
	for i := range vwc.Webhooks {
		if vwc.Webhooks[i].Name == WebhookName && !equality.Semantic.DeepEqual(vwc.Webhooks[i].Rules, want) {
			vwc.Webhooks[i].Rules = want
			changed = true
		}
	}
	if changed {
		// The optimistic lock: webhooks is one list in a merge patch, and cert-manager
		// writes its caBundle.
		if err := r.Client.Patch(ctx, vwc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return reconcile.Result{}, fmt.Errorf("register the guard for %d infrastructure machine templates: %w", len(infra), err)
		}
		ctrl.LoggerFrom(ctx).Info("Registered the guard for the infrastructure machine templates installed", "templates", infra)
	}
	return reconcile.Result{RequeueAfter: registrarResync}, nil
}
