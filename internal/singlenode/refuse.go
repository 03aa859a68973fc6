package singlenode

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
)

// refusals asks the planner about the Machine's change and returns what it refuses.
func (r *Reconciler) refusals(ctx context.Context, machine *clusterv1.Machine, res *kcppkg.UpToDateResult, aligned desiredObjects) ([]planner.Decision, error) {
	if r.Planner == nil {
		return nil, errors.New("single-node control plane: no planner configured")
	}
	current, desired, err := planRequest(machine, res, aligned)
	if err != nil {
		return nil, err
	}
	settings, err := r.settings(ctx)
	if err != nil {
		return nil, err
	}
	result, err := r.Planner.CanUpdateMachine(settings, current, desired)
	if err != nil {
		return nil, fmt.Errorf("plan the in-place update of Machine %s: %w", machine.Name, err)
	}
	return result.Refused(), nil
}

// refuse records that the new spec cannot be applied in place: InPlaceUpdate=False
// with reason ReasonRefused and every refused field on the KCP and the Cluster, and
// Events on the KCP and the Machine when this refusal is new. Nothing is touched and
// the hold stays (released, KCP would replace the Machine). It looks again later,
// so a policy or settings change, or a spec change, moves on.
func (r *Reconciler) refuse(ctx context.Context, obs *observed, machine *clusterv1.Machine, why string) (ctrl.Result, error) {
	msg := fmt.Sprintf("Machine %s cannot be updated in place, so nothing was changed and KubeadmControlPlane %s stays paused at its new spec (no Machine is created): %s. Revert or change the spec, or remove the Cluster's %s annotation to let KubeadmControlPlane replace the Machine",
		machine.Name, obs.kcp.Name, why, inplacev1.SingleNodeControlPlaneAnnotation)
	if cur := meta.FindStatusCondition(obs.kcp.Status.Conditions, inplacev1.InPlaceUpdateCondition); cur == nil || cur.Reason != inplacev1.ReasonRefused || cur.Message != msg {
		ctrl.LoggerFrom(ctx).Info("In-place update of a control-plane Machine refused", "Machine", client.ObjectKeyFromObject(machine).String(), "refused", why)
		r.Recorder.Eventf(obs.kcp, machine, corev1.EventTypeWarning, inplacev1.EventUpdateRefused, "Plan", "%s", eventNote(msg))
		r.Recorder.Eventf(machine, obs.kcp, corev1.EventTypeWarning, inplacev1.EventUpdateRefused, "Plan", "%s", eventNote(why))
	}
	return ctrl.Result{RequeueAfter: waitRequeue}, r.setCondition(ctx, obs, metav1.ConditionFalse, inplacev1.ReasonRefused, msg)
}

// updateWorkloadKubeadmConfig updates the workload cluster's kubeadm-config ConfigMap
// from the KCP's spec (updateKubeadmConfigMap).
func (r *Reconciler) updateWorkloadKubeadmConfig(ctx context.Context, obs *observed) error {
	if r.Workloads == nil {
		return errors.New("single-node control plane: no workload cluster clients configured")
	}
	wc, err := r.Workloads.WorkloadClient(ctx, client.ObjectKeyFromObject(obs.cluster))
	if err != nil {
		return fmt.Errorf("workload cluster of Cluster %s: %w", obs.cluster.Name, err)
	}
	return updateKubeadmConfigMap(ctx, wc, obs.kcp)
}
