package singlenode

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// maxReplicas is the first replica count that upstream KubeadmControlPlane can update in
// place on its own (its webhook allows rollout.strategy.rollingUpdate.maxSurge 0 from 3
// replicas); below it the single-node path takes over when the Cluster opted in.
const maxReplicas = 3

// TargetHash returns the hash of the KubeadmControlPlane spec fields whose change makes
// control-plane Machines outdated in KCP's up-to-date comparison (controlplane/kubeadm/pkg
// UpToDate -> matchesMachineSpec): spec.version (Machine version), spec.kubeadmConfigSpec
// (matchesKubeadmConfig) and spec.machineTemplate.spec.infrastructureRef
// (matchesInfraMachine compares the template the InfraMachine was cloned from).
// Everything else in the spec is either propagated in place by KCP (labels, annotations,
// deletion timeouts, taints) or is an explicit replacement request (rollout.before/after)
// that the hold does not intercept.
func TargetHash(kcp *controlplanev1.KubeadmControlPlane) string {
	target := struct {
		Version           string                                     `json:"version"`
		KubeadmConfigSpec bootstrapv1.KubeadmConfigSpec              `json:"kubeadmConfigSpec"`
		InfraRef          clusterv1.ContractVersionedObjectReference `json:"infrastructureRef"`
	}{
		Version:           kcp.Spec.Version,
		KubeadmConfigSpec: kcp.Spec.KubeadmConfigSpec,
		InfraRef:          kcp.Spec.MachineTemplate.Spec.InfrastructureRef,
	}
	// Marshalling Go structs is deterministic (fields in declaration order, map keys
	// sorted), so equal specs give equal hashes.
	b, err := json.Marshal(target)
	if err != nil {
		// The types are plain data; Marshal cannot fail on them. An empty hash would
		// compare unequal to any real one and so only ever cause an extra hold.
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:10])
}

// HoldInput is what the admission webhook knows about one KubeadmControlPlane update.
type HoldInput struct {
	Old, New *controlplanev1.KubeadmControlPlane
	// OptedIn is Enrolled for the new object: the namespace opted in to capi-inplace,
	// and the owning Cluster or the new KCP carries SingleNodeControlPlaneAnnotation
	// "true". Only consulted when it matters (see NeedsCluster).
	OptedIn bool
	// Release is the value of HoldReleaseAnnotation on the new object ("" when absent).
	Release string
	// ReleaseUserOK is false when the webhook is configured with the controller's
	// username and the request came from someone else.
	ReleaseUserOK bool
}

// HoldDecision says how to mutate the new object: when Hold is false the update passes
// without hold annotations added. HoldReleaseAnnotation is always stripped.
type HoldDecision struct {
	Hold bool
	// Released is true when this write is the controller's release of the hold.
	Released bool
	// Target is the value of HoldAnnotation.
	Target string
	// OperatorPaused is the value of HoldOperatorPausedAnnotation (present when true).
	OperatorPaused bool
	// Reason explains the decision for logs.
	Reason string
	// Refused, when set, is why the write is refused (the object is left as it is).
	Refused string
}

// IsHeld reports whether a KubeadmControlPlane carries capi-inplace's hold.
func IsHeld(kcp *controlplanev1.KubeadmControlPlane) bool {
	_, ok := kcp.GetAnnotations()[inplacev1.HoldAnnotation]
	return ok
}

func hasPaused(kcp *controlplanev1.KubeadmControlPlane) bool {
	_, ok := kcp.GetAnnotations()[clusterv1.PausedAnnotation]
	return ok
}

func replicasBelowThreshold(kcp *controlplanev1.KubeadmControlPlane) bool {
	// KCP defaults replicas to 1 when unset.
	return kcp.Spec.Replicas == nil || *kcp.Spec.Replicas < maxReplicas
}

// NeedsCluster reports whether DecideHold's answer depends on the Cluster's opt-in, so
// that the webhook reads the Cluster only for updates that may start a hold or take
// the KCP's opt-in away from a held KCP.
func NeedsCluster(old, updated *controlplanev1.KubeadmControlPlane) bool {
	if IsHeld(old) {
		return removesOptIn(old, updated)
	}
	return replicasBelowThreshold(updated) && TargetHash(old) != TargetHash(updated)
}

// removesOptIn reports whether a write takes the KCP's own opt-in away.
func removesOptIn(old, updated *controlplanev1.KubeadmControlPlane) bool {
	return KCPOptedIn(old) && !KCPOptedIn(updated)
}

// optOutRefusal is the refusal of a write that would hand a held KCP back to
// KubeadmControlPlane, which would then replace its outdated Machines.
func optOutRefusal(kcp *controlplanev1.KubeadmControlPlane) string {
	return fmt.Sprintf("KubeadmControlPlane %s is held for an in-place update (annotation %s): removing its last single-node opt-in (%s) now hands it back to KubeadmControlPlane, "+
		"which replaces the outdated control-plane Machine with a new one. To cancel the update first, revert the spec (the hold is released once every Machine is up to date again), then remove the opt-in; "+
		"to accept the replacement, set annotation %s=<reason> in the same write",
		kcp.Name, inplacev1.HoldAnnotation, inplacev1.SingleNodeControlPlaneAnnotation, inplacev1.AllowReplaceAnnotation)
}

// DecideHold is the admission webhook's decision for a KubeadmControlPlane UPDATE.
//
//   - An active hold (on the old object) is kept on the new one whatever the writer sent
//     (a server-side apply that does not list the annotations, like the topology
//     controller's; a kubectl edit that deletes them), with the target following the
//     spec, unless the write is the controller's release: it carries
//     HoldReleaseAnnotation with the hold's current value (and, when configured, comes
//     from the controller's user).
//   - A write to a held KCP that removes its last opt-in (the KCP's own, with no
//     Cluster opt-in left) is refused unless it sets a new AllowReplaceAnnotation
//     value: the controller would release the hold and KCP would replace the Machine,
//     the one outcome this path exists to prevent. The controller keeps the Cluster's
//     opt-in copied on a held KCP (CopyOptIn), so the last opt-in is the KCP's.
//   - A new hold starts when the KCP is enrolled (Enrolled), the control plane has
//     fewer than three replicas and the update changes the target: KCP then never
//     observes an outdated spec without the pause, so it never starts a surge.
func DecideHold(in HoldInput) HoldDecision {
	oldTarget, newTarget := TargetHash(in.Old), TargetHash(in.New)
	if IsHeld(in.Old) {
		target := in.Old.Annotations[inplacev1.HoldAnnotation]
		if in.Release != "" && in.Release == target && in.ReleaseUserOK && oldTarget == newTarget {
			return HoldDecision{Released: true, Reason: "released by capi-inplace's controller"}
		}
		if removesOptIn(in.Old, in.New) && !in.OptedIn && inplacev1.AllowReplaceOf(in.Old.Annotations, in.New.Annotations) == "" {
			return HoldDecision{Refused: optOutRefusal(in.Old), Reason: "the write removes the opt-in of a held KubeadmControlPlane"}
		}
		if oldTarget != newTarget {
			target = newTarget
		}
		_, operatorPaused := in.Old.Annotations[inplacev1.HoldOperatorPausedAnnotation]
		return HoldDecision{Hold: true, Target: target, OperatorPaused: operatorPaused, Reason: "hold active"}
	}
	switch {
	case oldTarget == newTarget:
		return HoldDecision{Reason: "machine-relevant spec unchanged"}
	case !replicasBelowThreshold(in.New):
		return HoldDecision{Reason: "three or more replicas: upstream in-place path applies"}
	case !in.OptedIn:
		return HoldDecision{Reason: "cluster did not opt in"}
	}
	return HoldDecision{
		Hold:           true,
		Target:         newTarget,
		OperatorPaused: hasPaused(in.Old) || hasPaused(in.New),
		Reason:         "machine-relevant spec changed",
	}
}

// HoldAnnotations returns the annotations a hold decision puts on the new object.
func (d HoldDecision) HoldAnnotations() map[string]string {
	if !d.Hold {
		return nil
	}
	out := map[string]string{
		clusterv1.PausedAnnotation: "",
		inplacev1.HoldAnnotation:   d.Target,
	}
	if d.OperatorPaused {
		out[inplacev1.HoldOperatorPausedAnnotation] = "true"
	}
	return out
}
