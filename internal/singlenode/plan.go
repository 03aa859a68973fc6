package singlenode

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"

	"github.com/capi-inplace/capi-inplace/internal/planner"
)

// planRequest builds the two sides the planner judges, as KubeadmControlPlane builds
// its CanUpdateMachine request (createRequest in controlplane/kubeadm/reconcilers/
// kubeadmcontrolplane/inplace_canupdatemachine.go): the stored Machine against the
// desired one after a server dry run (aligned), the KubeadmConfigs prepared for the
// diff by KCP's own PrepareKubeadmConfigsForDiff (the init configuration of the first
// node read as a join configuration), the stored InfraMachine with the desired labels
// and annotations against the desired one after the dry run. So the single-node path
// asks the planner exactly what the hooks would be asked for the same change.
func planRequest(stored *clusterv1.Machine, res *kcppkg.UpToDateResult, aligned desiredObjects) (current, desired planner.Objects, err error) {
	if res == nil || res.CurrentKubeadmConfig == nil || res.DesiredKubeadmConfig == nil || res.CurrentInfraMachine == nil {
		return planner.Objects{}, planner.Objects{}, fmt.Errorf("machine %s: KubeadmControlPlane's comparison gave no current KubeadmConfig or infrastructure machine", stored.Name)
	}
	desiredKC, currentKC := kcppkg.PrepareKubeadmConfigsForDiff(res.DesiredKubeadmConfig, res.CurrentKubeadmConfig, true)
	currentKC.Labels, currentKC.Annotations = desiredKC.Labels, desiredKC.Annotations

	currentInfra := res.CurrentInfraMachine.DeepCopy()
	currentInfra.SetLabels(aligned.infraMachine.GetLabels())
	currentInfra.SetAnnotations(aligned.infraMachine.GetAnnotations())

	var desiredMachine clusterv1.Machine
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(aligned.machine.Object, &desiredMachine); err != nil {
		return planner.Objects{}, planner.Objects{}, fmt.Errorf("decode aligned Machine %s: %w", stored.Name, err)
	}

	if current.Machine, err = machineForDiff(stored); err != nil {
		return planner.Objects{}, planner.Objects{}, err
	}
	if desired.Machine, err = machineForDiff(&desiredMachine); err != nil {
		return planner.Objects{}, planner.Objects{}, err
	}
	if current.Bootstrap, err = kubeadmConfigForDiff(currentKC); err != nil {
		return planner.Objects{}, planner.Objects{}, err
	}
	if desired.Bootstrap, err = kubeadmConfigForDiff(desiredKC); err != nil {
		return planner.Objects{}, planner.Objects{}, err
	}
	current.Infrastructure = requestObject(currentInfra)
	desired.Infrastructure = requestObject(aligned.infraMachine)
	return current, desired, nil
}

func machineForDiff(m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	return toUnstructured(&clusterv1.Machine{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations},
		Spec:       *m.Spec.DeepCopy(),
	})
}

func kubeadmConfigForDiff(kc *bootstrapv1.KubeadmConfig) (*unstructured.Unstructured, error) {
	return toUnstructured(&bootstrapv1.KubeadmConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: kc.Name, Namespace: kc.Namespace, Labels: kc.Labels, Annotations: kc.Annotations},
		Spec:       *kc.Spec.DeepCopy(),
	})
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T to unstructured: %w", obj, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// refusalMessage lists what the planner refused, one field with its reason each.
func refusalMessage(refused []planner.Decision) string {
	parts := make([]string, 0, len(refused))
	for _, d := range refused {
		parts = append(parts, fmt.Sprintf("%s %s: %s", d.Object, d.Field, d.Reason))
	}
	return strings.Join(parts, "; ")
}
