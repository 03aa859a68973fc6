package singlenode

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// FailedUpdate is the value of a Machine's inplacev1.FailedUpdateAnnotation: the
// record that its node update to Target failed, with the condition reason of that
// failure.
type FailedUpdate struct {
	// Target is the KubeadmControlPlane's TargetHash the update was for.
	Target string `json:"target"`
	// Reason is the InPlaceUpdate condition reason (inplacev1.Reason*).
	Reason string `json:"reason"`
}

// Encode is the annotation value of f.
func (f FailedUpdate) Encode() string {
	b, _ := json.Marshal(f) // two strings always encode
	return string(b)
}

// MachineFailedUpdate reads the Machine's failure record. A value that does not
// decode counts as none: the next reconcile asks the coordinator, whose verdict on
// a failed update stays until a retry or a new spec, and records it again.
func MachineFailedUpdate(m *clusterv1.Machine) (FailedUpdate, bool) {
	v, ok := m.Annotations[inplacev1.FailedUpdateAnnotation]
	if !ok {
		return FailedUpdate{}, false
	}
	var f FailedUpdate
	if json.Unmarshal([]byte(v), &f) != nil || f.Target == "" || f.Reason == "" {
		return FailedUpdate{}, false
	}
	return f, true
}

// legacyFailedUpdate is the record a KubeadmControlPlane's legacy
// inplacev1.HoldFailedAnnotation stands for. Its reason is the one the failure wrote
// into the KCP's InPlaceUpdate condition (a DeadlineExceeded failure is still asked
// about again), else the generic failure.
func legacyFailedUpdate(kcp *controlplanev1.KubeadmControlPlane) FailedUpdate {
	f := FailedUpdate{Target: kcp.Annotations[inplacev1.HoldFailedAnnotation], Reason: inplacev1.ReasonFailed}
	if c := meta.FindStatusCondition(kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition); c != nil &&
		(inplacev1.FailedReason(c.Reason) || c.Reason == inplacev1.ReasonRefused) {
		f.Reason = c.Reason
	}
	return f
}

// migrateLegacyFailure moves a failure recorded on the KubeadmControlPlane by an
// earlier version (inplacev1.HoldFailedAnnotation) onto the Machine Decide
// attributes it to (none when it is not about the current target), then removes it
// from the KCP. The Machine's record is written first, so a crash in between leaves
// the KCP's to be moved again, to the same value.
func (r *Reconciler) migrateLegacyFailure(ctx context.Context, obs *observed, d Decision) (ctrl.Result, error) {
	if m := obs.machine(d.Machine); m != nil {
		if err := r.patchMachineAnnotations(ctx, m, map[string]*string{inplacev1.FailedUpdateAnnotation: ptr.To(legacyFailedUpdate(obs.kcp).Encode())}); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.patchKCPAnnotations(ctx, obs.kcp, map[string]*string{inplacev1.HoldFailedAnnotation: nil}); err != nil {
		return ctrl.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Moved a failure recorded on the KubeadmControlPlane to its Machine", "Machine", d.Machine)
	return ctrl.Result{RequeueAfter: time.Millisecond}, nil
}

// recordFailure writes the Machine's failure record for the KCP's current target.
// It takes the Machine's retry annotation in the same write: a retry asks for one
// attempt, and this one is over. The coordinator takes the annotation itself when it
// withdraws a failed plan; a failure found before it is asked (the API refuses the
// aligned objects) would otherwise be retried again and again.
func (r *Reconciler) recordFailure(ctx context.Context, obs *observed, m *clusterv1.Machine, reason string) error {
	rec := FailedUpdate{Target: TargetHash(obs.kcp), Reason: reason}.Encode()
	return r.patchMachineAnnotations(ctx, m, map[string]*string{
		inplacev1.FailedUpdateAnnotation: &rec,
		inplacev1.RetryAnnotation:        nil,
	})
}

// forgetFailures removes the failure record from each of the Machines that carry one.
func (r *Reconciler) forgetFailures(ctx context.Context, machines ...*clusterv1.Machine) error {
	for _, m := range machines {
		if m == nil {
			continue
		}
		if _, ok := m.Annotations[inplacev1.FailedUpdateAnnotation]; !ok {
			continue
		}
		if err := r.patchMachineAnnotations(ctx, m, map[string]*string{inplacev1.FailedUpdateAnnotation: nil}); err != nil {
			return err
		}
	}
	return nil
}

// patchMachineAnnotations sets (non-nil) or removes (nil) annotations of a Machine
// with a merge patch that names only those keys, so that concurrent writers' keys
// stay (a patch computed from a copy would delete them all when the copy's last
// annotation goes: docs/single-node.md, hooks.MarkAsDone), and updates m in place.
// Repeating it writes the same.
func (r *Reconciler) patchMachineAnnotations(ctx context.Context, m *clusterv1.Machine, set map[string]*string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	if err != nil {
		return fmt.Errorf("patch annotations of Machine %s: %w", m.Name, err)
	}
	if err := r.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("patch annotations of Machine %s: %w", m.Name, err)
	}
	return nil
}
