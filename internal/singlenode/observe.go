package singlenode

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/util/labels/format"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// observed is everything read for one held KubeadmControlPlane.
type observed struct {
	kcp     *controlplanev1.KubeadmControlPlane
	cluster *clusterv1.Cluster
	// namespace is the KCP's namespace (Enrolled).
	namespace *corev1.Namespace
	machines  []*clusterv1.Machine
	upToDate  map[string]bool
	results   map[string]*kcppkg.UpToDateResult
}

// observe reads the KCP's control-plane Machines, their KubeadmConfigs and
// InfraMachines, and runs KCP's own up-to-date comparison on each (kcppkg.UpToDate, the
// function KCP's NewControlPlane calls), so "outdated" means exactly what it means to
// KCP. The desired Machine, KubeadmConfig and InfraMachine come from the same call
// (desiredstate.ComputeDesired*), so alignment writes what KCP would have written.
func observe(ctx context.Context, c client.Client, kcp *controlplanev1.KubeadmControlPlane, cluster *clusterv1.Cluster, now time.Time) (*observed, error) {
	list := &clusterv1.MachineList{}
	if err := c.List(ctx, list, client.InNamespace(kcp.Namespace), client.MatchingLabels{
		clusterv1.ClusterNameLabel:             cluster.Name,
		clusterv1.MachineControlPlaneNameLabel: format.MustFormatValue(kcp.Name),
	}); err != nil {
		return nil, fmt.Errorf("list control-plane Machines: %w", err)
	}
	o := &observed{kcp: kcp, cluster: cluster, upToDate: map[string]bool{}, results: map[string]*kcppkg.UpToDateResult{}}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], kcp) {
			o.machines = append(o.machines, &list.Items[i])
		}
	}
	sort.Slice(o.machines, func(i, j int) bool { return o.machines[i].Name < o.machines[j].Name })

	infraMachines := map[string]*unstructured.Unstructured{}
	kubeadmConfigs := map[string]*bootstrapv1.KubeadmConfig{}
	for _, m := range o.machines {
		if m.Spec.InfrastructureRef.IsDefined() {
			infra, err := external.GetObjectFromContractVersionedRef(ctx, c, m.Spec.InfrastructureRef, m.Namespace)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("read infrastructure machine of Machine %s: %w", m.Name, err)
			default:
				infraMachines[m.Name] = infra
			}
		}
		if ref := m.Spec.Bootstrap.ConfigRef; ref.IsDefined() {
			kc := &bootstrapv1.KubeadmConfig{}
			err := c.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, kc)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("read KubeadmConfig of Machine %s: %w", m.Name, err)
			default:
				kubeadmConfigs[m.Name] = kc
			}
		}
	}
	reconciliationTime := metav1.NewTime(now)
	for _, m := range o.machines {
		ok, res, err := kcppkg.UpToDate(ctx, c, cluster, m, kcp, &reconciliationTime, infraMachines, kubeadmConfigs)
		if err != nil {
			return nil, fmt.Errorf("compare Machine %s with the KubeadmControlPlane: %w", m.Name, err)
		}
		o.upToDate[m.Name] = ok
		o.results[m.Name] = res
		if !ok {
			ctrl.LoggerFrom(ctx).V(1).Info("Control-plane Machine is not up to date", "Machine", klog.KObj(m), "why", res.LogMessages)
		}
	}
	return o, nil
}

// state reduces the observation to Decide's input.
func (o *observed) state() State {
	s := State{
		Held:           IsHeld(o.kcp),
		OptedIn:        Enrolled(o.namespace, o.cluster, o.kcp),
		BelowThreshold: replicasBelowThreshold(o.kcp),
		Target:         TargetHash(o.kcp),
		Updating:       o.kcp.Annotations[inplacev1.HoldUpdatingAnnotation],

		LegacyFailedTarget: o.kcp.Annotations[inplacev1.HoldFailedAnnotation],
	}
	for _, m := range o.machines {
		res := o.results[m.Name]
		ms := MachineState{
			Name:     m.Name,
			UpToDate: o.upToDate[m.Name],
			HasNode:  m.Status.NodeRef.IsDefined(),
			Deleting: !m.DeletionTimestamp.IsZero(),
		}
		_, ms.RetryRequested = m.Annotations[inplacev1.RetryAnnotation]
		_, ms.CancelRequested = m.Annotations[inplacev1.CancelAnnotation]
		if f, ok := MachineFailedUpdate(m); ok {
			ms.FailedTarget, ms.FailedReason = f.Target, f.Reason
		}
		if res != nil {
			ms.Eligible = res.EligibleForInPlaceUpdate
			ms.Complete = res.DesiredMachine != nil && res.DesiredKubeadmConfig != nil && res.DesiredInfraMachine != nil
			ms.Why = res.ConditionMessages
		}
		s.Machines = append(s.Machines, ms)
	}
	return s
}

func (o *observed) machine(name string) *clusterv1.Machine {
	for _, m := range o.machines {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// alignedUpToDate runs KCP's comparison on the objects as they will be once aligned
// (the server's dry-run results).
func alignedUpToDate(ctx context.Context, c client.Client, obs *observed, machine *clusterv1.Machine, aligned desiredObjects) (bool, []string, error) {
	m := machine.DeepCopy()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(aligned.machine.Object, m); err != nil {
		return false, nil, fmt.Errorf("decode aligned Machine %s: %w", machine.Name, err)
	}
	m.Status = machine.Status
	kc := &bootstrapv1.KubeadmConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(aligned.kubeadmConfig.Object, kc); err != nil {
		return false, nil, fmt.Errorf("decode aligned KubeadmConfig %s: %w", aligned.kubeadmConfig.GetName(), err)
	}
	now := metav1.Now()
	ok, res, err := kcppkg.UpToDate(ctx, c, obs.cluster, m, obs.kcp, &now,
		map[string]*unstructured.Unstructured{m.Name: aligned.infraMachine},
		map[string]*bootstrapv1.KubeadmConfig{m.Name: kc})
	if err != nil {
		return false, nil, fmt.Errorf("compare aligned Machine %s: %w", m.Name, err)
	}
	return ok, res.LogMessages, nil
}
