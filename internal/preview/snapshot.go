package preview

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// ObjectKey names an object of the Cluster's namespace by API group, kind and name:
// references in Cluster API (ContractVersionedObjectReference) carry no version.
type ObjectKey struct {
	Group string
	Kind  string
	Name  string
}

func (k ObjectKey) String() string { return k.Kind + " " + k.Name }

// KeyOf returns the key of an object.
func KeyOf(u *unstructured.Unstructured) ObjectKey {
	return ObjectKey{Group: u.GroupVersionKind().Group, Kind: u.GetKind(), Name: u.GetName()}
}

// RefKey returns the key a Cluster API reference points at.
func RefKey(ref clusterv1.ContractVersionedObjectReference) ObjectKey {
	return ObjectKey{Group: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
}

// Snapshot is one Cluster with everything that decides how its Machines roll out:
// either as it is in the management cluster (live) or with a proposed change applied.
type Snapshot struct {
	Cluster *clusterv1.Cluster
	// ControlPlane is the Cluster's KubeadmControlPlane; nil when the control plane is
	// not a KubeadmControlPlane (or there is none).
	ControlPlane       *controlplanev1.KubeadmControlPlane
	MachineDeployments []clusterv1.MachineDeployment
	MachineSets        []clusterv1.MachineSet
	Machines           []clusterv1.Machine
	// Objects are the bootstrap configs, infrastructure machines and their templates
	// the objects above reference.
	Objects map[ObjectKey]*unstructured.Unstructured
	// SecretSizes are the sizes of the Secrets that the desired KubeadmConfigs
	// (the KubeadmControlPlane's, each MachineDeployment's KubeadmConfigTemplate's)
	// reference, read under the budget UpdateMachine reads them by
	// (Gatherer.Secrets); nil when they were not read, and Build then does not
	// count them.
	SecretSizes secretbudget.Sizes
}

// DeepCopy returns an independent copy.
func (s Snapshot) DeepCopy() Snapshot {
	out := Snapshot{Objects: make(map[ObjectKey]*unstructured.Unstructured, len(s.Objects))}
	if s.Cluster != nil {
		out.Cluster = s.Cluster.DeepCopy()
	}
	if s.ControlPlane != nil {
		out.ControlPlane = s.ControlPlane.DeepCopy()
	}
	for i := range s.MachineDeployments {
		out.MachineDeployments = append(out.MachineDeployments, *s.MachineDeployments[i].DeepCopy())
	}
	for i := range s.MachineSets {
		out.MachineSets = append(out.MachineSets, *s.MachineSets[i].DeepCopy())
	}
	for i := range s.Machines {
		out.Machines = append(out.Machines, *s.Machines[i].DeepCopy())
	}
	for k, v := range s.Objects {
		out.Objects[k] = v.DeepCopy()
	}
	out.SecretSizes = maps.Clone(s.SecretSizes)
	return out
}

// Refs returns the keys of every object the snapshot's Machines, MachineSets,
// MachineDeployments and KubeadmControlPlane reference, in a stable order.
func (s Snapshot) Refs() []ObjectKey {
	var out []ObjectKey
	seen := map[ObjectKey]bool{}
	add := func(ref clusterv1.ContractVersionedObjectReference) {
		if !ref.IsDefined() {
			return
		}
		k := RefKey(ref)
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	if s.ControlPlane != nil {
		add(s.ControlPlane.Spec.MachineTemplate.Spec.InfrastructureRef)
	}
	for i := range s.MachineDeployments {
		add(s.MachineDeployments[i].Spec.Template.Spec.Bootstrap.ConfigRef)
		add(s.MachineDeployments[i].Spec.Template.Spec.InfrastructureRef)
	}
	for i := range s.MachineSets {
		add(s.MachineSets[i].Spec.Template.Spec.Bootstrap.ConfigRef)
		add(s.MachineSets[i].Spec.Template.Spec.InfrastructureRef)
	}
	for i := range s.Machines {
		add(s.Machines[i].Spec.Bootstrap.ConfigRef)
		add(s.Machines[i].Spec.InfrastructureRef)
	}
	return out
}

func (s Snapshot) machineDeployment(name string) *clusterv1.MachineDeployment {
	for i := range s.MachineDeployments {
		if s.MachineDeployments[i].Name == name {
			return &s.MachineDeployments[i]
		}
	}
	return nil
}

func (s Snapshot) machineSet(name string) *clusterv1.MachineSet {
	for i := range s.MachineSets {
		if s.MachineSets[i].Name == name {
			return &s.MachineSets[i]
		}
	}
	return nil
}

// toUnstructured converts a typed object, setting its apiVersion and kind (typed
// objects read through a client have an empty TypeMeta).
func toUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s to unstructured: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// fromUnstructured converts into a typed object.
func fromUnstructured(u *unstructured.Unstructured, obj any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("convert %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
