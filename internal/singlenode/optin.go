package singlenode

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// eventOptInCopied is the Event reason on a KubeadmControlPlane that got its Cluster's opt-in.
const eventOptInCopied = "SingleNodeOptInCopied"

// Enrolled reports whether the single-node path acts on a KubeadmControlPlane: its
// namespace opted in to capi-inplace (NamespaceEnabled, as for the hooks) and its
// Cluster or the KCP itself opted in to this path (OptedIn || KCPOptedIn). The hold
// webhook starts a hold, and the controller drives one, by this one rule; the
// controller does nothing at all in a namespace that is not enabled, so a hold and
// opt-in a tenant wrote themselves there move nothing.
func Enrolled(ns *corev1.Namespace, cluster *clusterv1.Cluster, kcp *controlplanev1.KubeadmControlPlane) bool {
	return NamespaceEnabled(ns) && (OptedIn(cluster) || KCPOptedIn(kcp))
}

// NamespaceEnabled reports whether a management-cluster namespace opted in to
// capi-inplace (inplacev1.NamespaceEnabled); nil (not found) did not.
func NamespaceEnabled(ns *corev1.Namespace) bool {
	return ns != nil && inplacev1.NamespaceEnabled(ns.Labels)
}

// readNamespace reads a KubeadmControlPlane's namespace; nil when it does not exist.
func readNamespace(ctx context.Context, c client.Reader, name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read namespace %s for the capi-inplace opt-in: %w", name, err)
	}
	return ns, nil
}

// CopyOptIn returns the annotations that copy a Cluster's single-node opt-in onto its
// KubeadmControlPlane, or nil when nothing is to be copied: the Cluster is not opted
// in, the KCP carries an opt-in value of its own (any value is the operator's or the
// topology controller's, never overwritten), or the opt-in was copied before and the
// KCP is not held (an operator who removed the copy from the KCP opted out there;
// copying again would overrule that).
//
// Why: Cluster API v1.14.2's hooks.MarkAsDone can delete every annotation of a
// Cluster, the opt-in included (docs/single-node.md has the cause and the upstream
// issue text); the KCP's copy survives that, and OptedIn || KCPOptedIn decides.
// While a hold is on, the Cluster's opt-in is copied whatever the marker says: a
// Cluster write is not judged by the hold webhook, so the opt-in must sit on the KCP,
// where removing it is refused while held (DecideHold); otherwise removing the
// Cluster's annotation would release the hold and KCP would replace the Machine.
func CopyOptIn(cluster *clusterv1.Cluster, kcp *controlplanev1.KubeadmControlPlane) map[string]string {
	if !OptedIn(cluster) || kcp == nil {
		return nil
	}
	if _, own := kcp.Annotations[inplacev1.SingleNodeControlPlaneAnnotation]; own {
		return nil
	}
	if _, copied := kcp.Annotations[inplacev1.SingleNodeOptInCopiedAnnotation]; copied && !IsHeld(kcp) {
		return nil
	}
	return map[string]string{
		inplacev1.SingleNodeControlPlaneAnnotation: "true",
		inplacev1.SingleNodeOptInCopiedAnnotation:  "true",
	}
}

// OptedIn reports whether a Cluster opted into the single-node control-plane path
// (inplacev1.SingleNodeOptedIn, the rule the admission guard and `capi-inplace plan`
// apply too, with OptedIn || KCPOptedIn).
func OptedIn(cluster *clusterv1.Cluster) bool {
	return cluster != nil && inplacev1.SingleNodeOptedIn(cluster.Annotations)
}

// KCPOptedIn reports whether the KubeadmControlPlane itself carries the opt-in (for a
// ClusterClass cluster: spec.topology.controlPlane.metadata.annotations, which the
// topology controller applies to the KCP in the same write as a version change).
//
// Why a second place (the cause as read from the code and the run's timeline):
// Cluster API v1.14's hooks.MarkAsDone deletes every annotation of
// the Cluster when the hook it marks done is the only annotation of its cached copy:
// removing it empties the map, and the merge patch from that copy is
// {"metadata":{"annotations":null}}, which also deletes an opt-in added after the
// cache read (seen in the late opt-in end-to-end run, annotation patched 1.3 s before
// spec.topology.version, right after the control plane initialized: KCP surged unheld;
// docs/single-node.md has the timeline and reproduction). The KCP's metadata is applied
// by the topology controller with server-side apply, which keeps fields other managers
// own.
func KCPOptedIn(kcp *controlplanev1.KubeadmControlPlane) bool {
	return kcp != nil && inplacev1.SingleNodeOptedIn(kcp.Annotations)
}

// optInSettled reports whether the KCP needs no copy whatever its Cluster says: it
// has an opt-in value of its own, or the copy was made before.
func optInSettled(kcp *controlplanev1.KubeadmControlPlane) bool {
	_, own := kcp.Annotations[inplacev1.SingleNodeControlPlaneAnnotation]
	_, copied := kcp.Annotations[inplacev1.SingleNodeOptInCopiedAnnotation]
	return own || copied
}

// copyOptIn copies the Cluster's opt-in onto kcp (CopyOptIn). cluster may be nil: it
// is read only when the KCP is not settled, so a KCP that carries its opt-in or the
// copy costs no request.
func (r *Reconciler) copyOptIn(ctx context.Context, kcp *controlplanev1.KubeadmControlPlane, cluster *clusterv1.Cluster) error {
	if optInSettled(kcp) && !IsHeld(kcp) {
		return nil
	}
	if cluster == nil {
		name := ClusterNameOf(kcp)
		if name == "" {
			return nil
		}
		cluster = &clusterv1.Cluster{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kcp.Namespace, Name: name}, cluster); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("read Cluster %s for the single-node opt-in: %w", name, err)
		}
	}
	add := CopyOptIn(cluster, kcp)
	if add == nil {
		return nil
	}
	set := map[string]*string{}
	for k, v := range add {
		set[k] = &v
	}
	// With the optimistic lock: a KCP whose opt-in an operator set meanwhile is read
	// again on the retry, and then settled.
	if err := r.patchKCPAnnotations(ctx, kcp, set); err != nil {
		return fmt.Errorf("copy the Cluster's single-node opt-in: %w", err)
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(kcp, cluster, corev1.EventTypeNormal, eventOptInCopied, "CopyOptIn",
			"copied %s=true from Cluster %s (Cluster API can drop a Cluster's annotations); remove it here too to opt out", inplacev1.SingleNodeControlPlaneAnnotation, cluster.Name)
	}
	return nil
}
