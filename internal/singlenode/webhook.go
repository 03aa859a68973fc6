package singlenode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// DefaultWebhookPath is where SetupWithManager registers the hold webhook on the
// manager's webhook server.
const DefaultWebhookPath = "/mutate-controlplane-cluster-x-k8s-io-v1beta2-kubeadmcontrolplane-inplace-hold"

// WebhookName is the name of the webhook inside its MutatingWebhookConfiguration.
const WebhookName = "hold.kubeadmcontrolplane.inplace.capi-inplace.dev"

// MutatingWebhook returns the registration of the hold webhook for a
// MutatingWebhookConfiguration, pointing at clientConfig (a Service or URL whose path
// is DefaultWebhookPath, with the CA bundle of the serving certificate).
//
// failurePolicy is Fail on purpose: with Ignore, a version change made while the
// extension is unreachable would reach KCP unheld, and KCP would create a surge
// Machine, the one thing this path exists to prevent. The rule covers UPDATE only,
// MatchConditions keep the writes it never changes away from it, and an update
// that changes none of the machine-relevant fields is answered without any read,
// so the blast radius of an unreachable extension is limited to delaying KCP spec
// changes and writes to a held KCP. matchPolicy Equivalent also routes v1beta1 writes through it
// (converted to v1beta2); reinvocationPolicy IfNeeded lets it see the object after
// other mutating webhooks (KCP's defaulting).
func MutatingWebhook(clientConfig admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.MutatingWebhook {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	none := admissionregistrationv1.SideEffectClassNone
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	return admissionregistrationv1.MutatingWebhook{
		Name:         WebhookName,
		ClientConfig: clientConfig,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{controlplanev1.GroupVersion.Group},
				APIVersions: []string{controlplanev1.GroupVersion.Version},
				Resources:   []string{"kubeadmcontrolplanes"},
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		MatchConditions:         MatchConditions(),
		FailurePolicy:           &fail,
		MatchPolicy:             &equivalent,
		SideEffects:             &none,
		TimeoutSeconds:          ptr.To[int32](10),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      &reinvoke,
	}
}

// MatchConditions send the hold webhook only the writes DecideHold may change,
// so that every other one is admitted without it, also while the extension is
// down: an update of a KubeadmControlPlane not being deleted that is held (the
// hold is kept whatever the writer sends), carries the release annotation, or
// changes the spec (a new hold starts only on a spec change). A metadata-only
// write to a KubeadmControlPlane that is not held (KCP's remediation annotation,
// an operator's pause) and the removal of finalizers at deletion pass.
func MatchConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{{
		Name: "may-hold",
		Expression: fmt.Sprintf("!has(object.metadata.deletionTimestamp) && (oldObject.metadata.?annotations[?'%s'].hasValue() || "+
			"object.metadata.?annotations[?'%s'].hasValue() || object.?spec != oldObject.?spec)", inplacev1.HoldAnnotation, inplacev1.HoldReleaseAnnotation),
	}}
}

// holdWebhook is the admission handler: it decodes, asks DecideHold and patches only
// metadata.annotations of the incoming object (built from the raw JSON, so fields the
// Go types do not know are never touched).
type holdWebhook struct {
	reader  client.Reader
	decoder admission.Decoder
	// controllerUser, when set, is the only user whose writes may release a hold.
	controllerUser string
}

var _ admission.Handler = &holdWebhook{}

// Handle implements admission.Handler.
func (w *holdWebhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	log := ctrl.LoggerFrom(ctx).WithValues("KubeadmControlPlane", req.Namespace+"/"+req.Name)

	oldKCP, newKCP := &controlplanev1.KubeadmControlPlane{}, &controlplanev1.KubeadmControlPlane{}
	if err := w.decoder.DecodeRaw(req.OldObject, oldKCP); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode old KubeadmControlPlane: %w", err))
	}
	if err := w.decoder.DecodeRaw(req.Object, newKCP); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decode KubeadmControlPlane: %w", err))
	}

	user := w.controllerUser
	in := HoldInput{
		Old:           oldKCP,
		New:           newKCP,
		Release:       newKCP.Annotations[inplacev1.HoldReleaseAnnotation],
		ReleaseUserOK: user == "" || req.UserInfo.Username == user,
	}
	if NeedsCluster(oldKCP, newKCP) {
		optedIn, err := w.optedIn(ctx, newKCP)
		if err != nil {
			// Not knowing the opt-in must not let an outdated spec through unheld; the
			// writer retries (the topology controller does so on its own).
			return admission.Errored(http.StatusServiceUnavailable, err)
		}
		in.OptedIn = optedIn
	}

	d := DecideHold(in)
	if d.Refused != "" {
		return admission.Denied(d.Refused)
	}
	patched, changed, err := withAnnotations(req.Object.Raw, d.HoldAnnotations(), []string{inplacev1.HoldReleaseAnnotation})
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !changed {
		return admission.Allowed(d.Reason)
	}
	if d.Hold {
		log.V(1).Info("Holding KubeadmControlPlane for an in-place update", "target", d.Target, "reason", d.Reason, "dryRun", ptr.Deref(req.DryRun, false))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}

// optedIn reads the KCP's namespace and, unless the KCP opts in itself, its Cluster,
// and answers Enrolled. A missing namespace or Cluster means no opt-in.
func (w *holdWebhook) optedIn(ctx context.Context, kcp *controlplanev1.KubeadmControlPlane) (bool, error) {
	ns, err := readNamespace(ctx, w.reader, kcp.Namespace)
	if err != nil || !NamespaceEnabled(ns) {
		return false, err
	}
	if KCPOptedIn(kcp) {
		return Enrolled(ns, nil, kcp), nil
	}
	name := ClusterNameOf(kcp)
	if name == "" {
		return false, nil
	}
	cluster := &clusterv1.Cluster{}
	if err := w.reader.Get(ctx, client.ObjectKey{Namespace: kcp.Namespace, Name: name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read Cluster %s/%s for the single-node opt-in: %w", kcp.Namespace, name, err)
	}
	return Enrolled(ns, cluster, kcp), nil
}

// ClusterNameOf returns the name of the Cluster owning a KubeadmControlPlane: its
// cluster-name label (set by the topology controller and by templates), else its
// Cluster owner reference (set by the Cluster controller).
func ClusterNameOf(kcp *controlplanev1.KubeadmControlPlane) string {
	if name := kcp.Labels[clusterv1.ClusterNameLabel]; name != "" {
		return name
	}
	for _, ref := range kcp.OwnerReferences {
		if ref.Kind == "Cluster" {
			return ref.Name
		}
	}
	return ""
}

// withAnnotations sets and removes annotations on a raw JSON object and reports
// whether anything changed.
func withAnnotations(raw []byte, set map[string]string, remove []string) ([]byte, bool, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, false, fmt.Errorf("decode KubeadmControlPlane: %w", err)
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	changed := false
	for k, v := range set {
		if cur, ok := annotations[k]; !ok || cur != v {
			annotations[k] = v
			changed = true
		}
	}
	for _, k := range remove {
		if _, ok := annotations[k]; ok {
			delete(annotations, k)
			changed = true
		}
	}
	if !changed {
		return raw, false, nil
	}
	u.SetAnnotations(annotations)
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, false, fmt.Errorf("encode KubeadmControlPlane: %w", err)
	}
	return b, true, nil
}
