package singlenode

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

// KCPFieldManager is the server-side apply field manager of KubeadmControlPlane
// (kcpManagerName in controlplane/kubeadm/reconcilers/kubeadmcontrolplane). The
// alignment writes under it so that field ownership ends up exactly as after KCP's own
// in-place update (triggerInPlaceUpdate): KCP's later applies own and keep these fields,
// and no field is left co-owned by capi-inplace.
const KCPFieldManager = "capi-kubeadmcontrolplane"

// desiredObjects are the three objects KCP would write for one Machine, already trimmed
// the way KCP trims them for an in-place update, as unstructured apply intents.
type desiredObjects struct {
	infraMachine  *unstructured.Unstructured
	kubeadmConfig *unstructured.Unstructured
	machine       *unstructured.Unstructured
}

// desiredFrom turns KCP's up-to-date result for a Machine into apply intents, mirroring
// triggerInPlaceUpdate (controlplane/kubeadm/reconcilers/kubeadmcontrolplane/
// inplace_trigger.go) without the update-in-progress annotation and pending hook, which
// belong to upstream's hook-driven path:
//   - InfraMachine: labels dropped (KCP syncs them continuously under another field
//     manager), annotations reduced to the two cloned-from annotations that
//     matchesInfraMachine compares;
//   - KubeadmConfig: labels and annotations dropped; the desired config is always the
//     join form (initConfiguration empty);
//   - Machine: as computed, with spec.version set to the KCP's version.
func desiredFrom(res *kcppkg.UpToDateResult) (desiredObjects, error) {
	if res == nil || res.DesiredMachine == nil {
		return desiredObjects{}, fmt.Errorf("no desired Machine computed")
	}
	if res.DesiredInfraMachine == nil {
		return desiredObjects{}, fmt.Errorf("no desired infrastructure machine computed (missing, or not cloned from the KCP's template)")
	}
	if res.DesiredKubeadmConfig == nil {
		return desiredObjects{}, fmt.Errorf("no desired KubeadmConfig computed (missing bootstrap config)")
	}

	infra := res.DesiredInfraMachine.DeepCopy()
	infra.SetLabels(nil)
	infra.SetAnnotations(map[string]string{
		clusterv1.TemplateClonedFromNameAnnotation:      res.DesiredInfraMachine.GetAnnotations()[clusterv1.TemplateClonedFromNameAnnotation],
		clusterv1.TemplateClonedFromGroupKindAnnotation: res.DesiredInfraMachine.GetAnnotations()[clusterv1.TemplateClonedFromGroupKindAnnotation],
	})

	kc := res.DesiredKubeadmConfig.DeepCopy()
	kc.Labels = nil
	kc.Annotations = nil
	kc.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfig"))
	kcU, err := toApplyIntent(kc)
	if err != nil {
		return desiredObjects{}, fmt.Errorf("KubeadmConfig %s: %w", kc.Name, err)
	}

	m := res.DesiredMachine.DeepCopy()
	m.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Machine"))
	mU, err := toApplyIntent(m)
	if err != nil {
		return desiredObjects{}, fmt.Errorf("machine %s: %w", m.Name, err)
	}

	infraU, err := toApplyIntent(infra)
	if err != nil {
		return desiredObjects{}, fmt.Errorf("%s %s: %w", infra.GetKind(), infra.GetName(), err)
	}
	return desiredObjects{infraMachine: infraU, kubeadmConfig: kcU, machine: mU}, nil
}

// toApplyIntent converts an object to unstructured and keeps only the paths a
// controller states an opinion on in an apply (as CAPI's ssa.PrepareModified does):
// identity, labels, annotations, finalizers, owner references and spec. Status and
// server-set metadata never enter an apply.
func toApplyIntent(obj runtime.Object) (*unstructured.Unstructured, error) {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert to unstructured: %w", err)
	}
	out := map[string]any{
		"apiVersion": raw["apiVersion"],
		"kind":       raw["kind"],
	}
	if spec, ok := raw["spec"]; ok {
		out["spec"] = spec
	}
	meta, _ := raw["metadata"].(map[string]any)
	keptMeta := map[string]any{}
	for _, k := range []string{"name", "namespace", "uid", "labels", "annotations", "finalizers", "ownerReferences"} {
		if v, ok := meta[k]; ok && v != nil {
			keptMeta[k] = v
		}
	}
	out["metadata"] = keptMeta
	return &unstructured.Unstructured{Object: out}, nil
}

// applier writes apply intents with KubeadmControlPlane's field manager.
type applier struct {
	c client.Client
}

// apply server-side applies the three objects in KCP's order (InfraMachine first, the
// write most likely to be refused by a provider webhook; the Machine last, because its
// spec.version is what marks the update as done for everyone else). Every step is an
// idempotent apply of a fixed intent, so the sequence is safe to repeat from the start
// after a failure or a restart at any point. With dryRun the server runs defaulting,
// validation and admission without persisting, and the returned objects are what the
// objects will look like once aligned.
func (a applier) apply(ctx context.Context, objs desiredObjects, dryRun bool) (desiredObjects, error) {
	opts := []client.ApplyOption{client.ForceOwnership, client.FieldOwner(KCPFieldManager)}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	out := desiredObjects{
		infraMachine:  objs.infraMachine.DeepCopy(),
		kubeadmConfig: objs.kubeadmConfig.DeepCopy(),
		machine:       objs.machine.DeepCopy(),
	}
	for _, u := range []*unstructured.Unstructured{out.infraMachine, out.kubeadmConfig} {
		if err := a.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...); err != nil {
			return desiredObjects{}, fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	if err := a.removeInitConfiguration(ctx, out.kubeadmConfig, dryRun); err != nil {
		return desiredObjects{}, err
	}
	if err := a.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(out.machine), opts...); err != nil {
		return desiredObjects{}, fmt.Errorf("apply Machine %s: %w", out.machine.GetName(), err)
	}
	return out, nil
}

// removeInitConfiguration drops initConfiguration from a KubeadmConfig created by
// kubeadm init when the apply could not remove it because no field manager owns it
// (KubeadmConfigs created by CAPI <= v1.11), as KCP's removeInitConfiguration does.
func (a applier) removeInitConfiguration(ctx context.Context, kc *unstructured.Unstructured, dryRun bool) error {
	init, found, _ := unstructured.NestedMap(kc.Object, "spec", "initConfiguration")
	if !found || len(init) == 0 {
		return nil
	}
	patch := []byte(`{"spec":{"initConfiguration":null}}`)
	opts := []client.PatchOption{client.FieldOwner(KCPFieldManager)}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	if err := a.c.Patch(ctx, kc, client.RawPatch("application/merge-patch+json", patch), opts...); err != nil {
		return fmt.Errorf("remove initConfiguration from KubeadmConfig %s: %w", kc.GetName(), err)
	}
	return nil
}

// desiredNode builds what the coordinator updates the node to once the objects are
// aligned, from the dry-run results, trimmed as the Machine controller trims the
// objects of an UpdateMachine request (cleanupMachine / cleanupUnstructured in
// core/reconcilers/machine/machine_controller_inplace_update.go: identity, labels,
// annotations and spec; no status). Typed objects, handed over in process.
func desiredNode(aligned desiredObjects) (coordinator.DesiredNode, error) {
	var machine clusterv1.Machine
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(aligned.machine.Object, &machine); err != nil {
		return coordinator.DesiredNode{}, fmt.Errorf("decode Machine %s: %w", aligned.machine.GetName(), err)
	}
	return coordinator.DesiredNode{
		Machine: &clusterv1.Machine{
			TypeMeta:   machine.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{Name: machine.Name, Namespace: machine.Namespace, Labels: machine.Labels, Annotations: machine.Annotations},
			Spec:       machine.Spec,
		},
		InfrastructureMachine: requestObject(aligned.infraMachine),
		BootstrapConfig:       requestObject(aligned.kubeadmConfig),
	}, nil
}

func requestObject(u *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(),
		"kind":       u.GetKind(),
		"spec":       u.Object["spec"],
	}}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetLabels(u.GetLabels())
	out.SetAnnotations(u.GetAnnotations())
	return out
}
