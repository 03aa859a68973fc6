package preview

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ErrInvalidChange is wrapped by every error about a proposed change that cannot be
// applied: unreadable YAML, an object of another cluster or namespace, an apiVersion
// other than the one the cluster serves.
var ErrInvalidChange = errors.New("invalid change")

// topologyOwnedLabel marks the MachineDeployments the topology controller manages.
const topologyOwnedLabel = "topology.cluster.x-k8s.io/owned"

// ParseChange reads a proposed change: one or more YAML (or JSON) documents, each one
// object with apiVersion, kind and metadata.name.
func ParseChange(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: document %d: %w", ErrInvalidChange, i+1, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%w: document %d needs apiVersion, kind and metadata.name", ErrInvalidChange, i+1)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no objects", ErrInvalidChange)
	}
	return out, nil
}

// ClusterNameOf returns the name of the Cluster a change is about, when the change
// says so: a Cluster object, a MachineDeployment's spec.clusterName, or the
// cluster-name label on any object. Empty when it does not.
func ClusterNameOf(change []*unstructured.Unstructured) string {
	for _, u := range change {
		if isKind(u, clusterv1.GroupVersion.Group, "Cluster") {
			return u.GetName()
		}
	}
	for _, u := range change {
		if isKind(u, clusterv1.GroupVersion.Group, "MachineDeployment") {
			if n, _, _ := unstructured.NestedString(u.Object, "spec", "clusterName"); n != "" {
				return n
			}
		}
		if n := u.GetLabels()[clusterv1.ClusterNameLabel]; n != "" {
			return n
		}
	}
	return ""
}

func isKind(u *unstructured.Unstructured, group, kind string) bool {
	return u.GroupVersionKind().Group == group && u.GetKind() == kind
}

// Apply merges a proposed change over the live snapshot and returns the proposed
// snapshot and notes for the operator. Each object is merged like a JSON merge patch
// (RFC 7386: maps merge, lists and scalars replace, null deletes) over the live object
// of the same group, kind and name; an object that does not exist yet is added.
// metadata other than labels and annotations, and status, are ignored.
//
// A Cluster whose spec.topology.version changes moves the version of the Cluster's
// KubeadmControlPlane and of its topology-owned MachineDeployments, as the topology
// controller eventually does. Other topology changes are derived from the ClusterClass
// by the topology controller, which Apply does not run: they are reported in a note.
// Gatherer.ProposeChange runs Cluster API's generator instead where it can.
func Apply(live Snapshot, change []*unstructured.Unstructured) (Snapshot, []string, error) {
	return apply(live, change, false)
}

// apply is Apply; with derivedTopology the change already holds the topology
// controller's writes (Gatherer.ProposeChange), so the Cluster's topology version moves
// nothing by itself.
func apply(live Snapshot, change []*unstructured.Unstructured, derivedTopology bool) (Snapshot, []string, error) {
	out := live.DeepCopy()
	var notes []string
	ns := live.Cluster.Namespace

	// The Cluster first, so that objects named explicitly in the change win over what
	// the topology version implies.
	ordered := slices.Clone(change)
	slices.SortStableFunc(ordered, func(a, b *unstructured.Unstructured) int {
		return boolRank(isKind(b, clusterv1.GroupVersion.Group, "Cluster")) - boolRank(isKind(a, clusterv1.GroupVersion.Group, "Cluster"))
	})
	for _, obj := range ordered {
		if n := obj.GetNamespace(); n != "" && n != ns {
			return Snapshot{}, nil, fmt.Errorf("%w: %s %s is in namespace %s, the Cluster in %s", ErrInvalidChange, obj.GetKind(), obj.GetName(), n, ns)
		}
		var (
			n   []string
			err error
		)
		switch {
		case isKind(obj, clusterv1.GroupVersion.Group, "Cluster"):
			n, err = out.applyCluster(obj, derivedTopology)
		case isKind(obj, controlplanev1.GroupVersion.Group, "KubeadmControlPlane"):
			n, err = out.applyControlPlane(obj)
		case isKind(obj, clusterv1.GroupVersion.Group, "MachineDeployment"):
			n, err = out.applyMachineDeployment(obj)
		case isKind(obj, clusterv1.GroupVersion.Group, "Machine"), isKind(obj, clusterv1.GroupVersion.Group, "MachineSet"):
			err = fmt.Errorf("%w: %s %s: Machines and MachineSets follow their owner; change the KubeadmControlPlane or MachineDeployment instead", ErrInvalidChange, obj.GetKind(), obj.GetName())
		default:
			n, err = out.applyObject(obj, live)
		}
		if err != nil {
			return Snapshot{}, nil, err
		}
		notes = append(notes, n...)
	}
	return out, notes, nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mergeTyped merges a change object over a typed live object (through unstructured)
// and decodes the result back into it.
func mergeTyped(obj any, live *unstructured.Unstructured, change *unstructured.Unstructured) error {
	if live.GetAPIVersion() != change.GetAPIVersion() {
		return fmt.Errorf("%w: %s %s has apiVersion %s; plan compares %s objects", ErrInvalidChange, change.GetKind(), change.GetName(), change.GetAPIVersion(), live.GetAPIVersion())
	}
	merged := mergeObject(live.Object, change.Object)
	return fromUnstructured(&unstructured.Unstructured{Object: merged}, obj)
}

func (s *Snapshot) applyCluster(change *unstructured.Unstructured, derivedTopology bool) ([]string, error) {
	if change.GetName() != s.Cluster.Name {
		return nil, fmt.Errorf("%w: the change names Cluster %s, the plan is for Cluster %s", ErrInvalidChange, change.GetName(), s.Cluster.Name)
	}
	live, err := toUnstructured(s.Cluster, clusterv1.GroupVersion.WithKind("Cluster"))
	if err != nil {
		return nil, err
	}
	before := s.Cluster.DeepCopy()
	updated := &clusterv1.Cluster{}
	if err := mergeTyped(updated, live, change); err != nil {
		return nil, err
	}
	s.Cluster = updated

	var notes []string
	oldTopo, newTopo := before.Spec.Topology, updated.Spec.Topology
	if !oldTopo.IsDefined() {
		if newTopo.IsDefined() {
			notes = append(notes, "the Cluster has no spec.topology (it is not a ClusterClass cluster): spec.topology changes nothing here; "+
				"change the KubeadmControlPlane and MachineDeployments instead")
		}
		return notes, nil
	}
	if derivedTopology {
		if !reflect.DeepEqual(oldTopo, newTopo) {
			notes = append(notes, "Cluster spec.topology: planned with the writes Cluster API's topology controller derives from it (its desired-state generator; "+
				"for a chained upgrade, the first step: each later step is its own write)")
		}
		return notes, nil
	}
	if newTopo.Version != oldTopo.Version {
		var moved []string
		if s.ControlPlane != nil && s.ControlPlane.Spec.Version != newTopo.Version {
			s.ControlPlane.Spec.Version = newTopo.Version
			moved = append(moved, "KubeadmControlPlane "+s.ControlPlane.Name)
		}
		for i := range s.MachineDeployments {
			md := &s.MachineDeployments[i]
			if _, owned := md.Labels[topologyOwnedLabel]; owned && md.Spec.Template.Spec.Version != newTopo.Version {
				md.Spec.Template.Spec.Version = newTopo.Version
				moved = append(moved, "MachineDeployment "+md.Name)
			}
		}
		notes = append(notes, fmt.Sprintf("Cluster topology version %s -> %s: the topology controller sets it on %s (control plane first, then workers)",
			oldTopo.Version, newTopo.Version, joinOr(moved, "no object")))
	}
	oldRest, newRest := oldTopo.DeepCopy(), newTopo.DeepCopy()
	oldRest.Version, newRest.Version = "", ""
	if !reflect.DeepEqual(oldRest, newRest) {
		notes = append(notes, "other spec.topology changes (classes, variables, replicas) are derived from the ClusterClass by the topology controller, which plan does not run: "+
			"they are not previewed; put the resulting KubeadmControlPlane, MachineDeployment or templates in the change file instead")
	}
	return notes, nil
}

func (s *Snapshot) applyControlPlane(change *unstructured.Unstructured) ([]string, error) {
	if s.ControlPlane == nil || s.ControlPlane.Name != change.GetName() {
		return nil, fmt.Errorf("%w: KubeadmControlPlane %s is not the control plane of Cluster %s", ErrInvalidChange, change.GetName(), s.Cluster.Name)
	}
	live, err := toUnstructured(s.ControlPlane, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
	if err != nil {
		return nil, err
	}
	updated := &controlplanev1.KubeadmControlPlane{}
	if err := mergeTyped(updated, live, change); err != nil {
		return nil, err
	}
	s.ControlPlane = updated
	return nil, nil
}

func (s *Snapshot) applyMachineDeployment(change *unstructured.Unstructured) ([]string, error) {
	md := s.machineDeployment(change.GetName())
	if md == nil {
		return []string{fmt.Sprintf("MachineDeployment %s does not exist yet: it creates new machines and changes none of the existing ones", change.GetName())}, nil
	}
	if md.Spec.ClusterName != s.Cluster.Name {
		return nil, fmt.Errorf("%w: MachineDeployment %s belongs to Cluster %s", ErrInvalidChange, md.Name, md.Spec.ClusterName)
	}
	live, err := toUnstructured(md, clusterv1.GroupVersion.WithKind("MachineDeployment"))
	if err != nil {
		return nil, err
	}
	updated := &clusterv1.MachineDeployment{}
	if err := mergeTyped(updated, live, change); err != nil {
		return nil, err
	}
	*md = *updated
	return nil, nil
}

// applyObject merges a bootstrap config, infrastructure object or template.
func (s *Snapshot) applyObject(change *unstructured.Unstructured, live Snapshot) ([]string, error) {
	key := KeyOf(change)
	cur, ok := s.Objects[key]
	if !ok {
		u := change.DeepCopy()
		u.SetNamespace(s.Cluster.Namespace)
		unstructured.RemoveNestedField(u.Object, "status")
		s.Objects[key] = u
		return nil, nil
	}
	if cur.GetAPIVersion() != change.GetAPIVersion() {
		return nil, fmt.Errorf("%w: %s %s has apiVersion %s; the cluster serves it as %s", ErrInvalidChange, change.GetKind(), change.GetName(), change.GetAPIVersion(), cur.GetAPIVersion())
	}
	merged := &unstructured.Unstructured{Object: mergeObject(cur.Object, change.Object)}
	s.Objects[key] = merged
	var notes []string
	if prev, inLive := live.Objects[key]; inLive && strings.HasSuffix(key.Kind, "Template") && !reflect.DeepEqual(prev.Object["spec"], merged.Object["spec"]) {
		notes = append(notes, fmt.Sprintf("%s changes under the same name: Cluster API rolls machines out only when a reference changes "+
			"(ClusterClass rotates templates to new names); planned as if it were rotated", key))
	}
	return notes, nil
}

// mergeObject returns live with patch merged over it (RFC 7386), keeping live's
// metadata except labels and annotations, and dropping patch's status.
func mergeObject(live, patch map[string]any) map[string]any {
	out, _ := runtime.DeepCopyJSONValue(live).(map[string]any)
	p, _ := runtime.DeepCopyJSONValue(patch).(map[string]any)
	delete(p, "status")
	if meta, ok := p["metadata"].(map[string]any); ok {
		kept := map[string]any{}
		for _, k := range []string{"labels", "annotations"} {
			if v, ok := meta[k]; ok {
				kept[k] = v
			}
		}
		p["metadata"] = kept
	}
	mergeInto(out, p)
	return out
}

func mergeInto(target, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(target, k)
			continue
		}
		pm, pIsMap := v.(map[string]any)
		tm, tIsMap := target[k].(map[string]any)
		if pIsMap && tIsMap {
			mergeInto(tm, pm)
			continue
		}
		if pIsMap {
			fresh := map[string]any{}
			mergeInto(fresh, pm)
			target[k] = fresh
			continue
		}
		target[k] = v
	}
}

func joinOr(items []string, empty string) string {
	if len(items) == 0 {
		return empty
	}
	return strings.Join(items, ", ")
}
