package guard

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/exp/topology/desiredstate"
	"sigs.k8s.io/cluster-api/exp/topology/scope"

	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// errReadOnly is what the desired-state generator gets if it ever tries to write: the
// guard only computes, and Cluster API's RuntimeSDK paths (lifecycle hooks, which
// write their pending marks on the Cluster) are off in this process.
var errReadOnly = errors.New("capi-inplace guard: the topology desired state is computed read-only")

// topologyChanges returns the writes the topology controller derives from a write of
// Cluster.spec.topology: for the Cluster's KubeadmControlPlane, its infrastructure
// machine template and each topology-owned MachineDeployment with its bootstrap and
// infrastructure templates, a merge patch of spec from the desired state of the stored
// Cluster to the desired state of the written one. Both are computed by Cluster API's
// own desired-state generator (exp/topology/desiredstate, the code of the topology
// controller: ClusterClass templates, variables and inline patches) over the same
// current objects, so the patches hold exactly what the write changes. Templates keep
// their current names: preview.Apply plans a template changed under its name as
// rotated, which is what the topology controller then does.
//
// It returns no changes for a Cluster without a ClusterClass. An error means the
// desired state could not be computed (a ClusterClass or template that cannot be read,
// external patches, which need the RuntimeSDK this process does not run).
func topologyChanges(ctx context.Context, reader client.Reader, live preview.Snapshot, old, written *clusterv1.Cluster) ([]*unstructured.Unstructured, error) {
	if !written.Spec.Topology.IsDefined() || !old.Spec.Topology.IsDefined() {
		return nil, nil
	}
	c, ok := reader.(client.Client)
	if !ok {
		return nil, errors.New("the guard's reader is not a client.Client, which Cluster API's desired-state generator needs")
	}
	gen, err := desiredstate.NewGenerator(readOnly(c), noClusterCache{}, nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("topology desired-state generator: %w", err)
	}
	current, err := currentState(live)
	if err != nil {
		return nil, err
	}
	desired := func(cluster *clusterv1.Cluster) (*scope.ClusterState, error) {
		bp, err := blueprint(ctx, reader, cluster)
		if err != nil {
			return nil, err
		}
		s := scope.New(cluster.DeepCopy())
		s.Blueprint = bp
		s.Current = current.deepCopy(s.Current.Cluster)
		d, err := gen.Generate(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("compute the topology desired state of Cluster %s/%s (class %s): %w", cluster.Namespace, cluster.Name, cluster.GetClassKey(), err)
		}
		return d, nil
	}
	before, err := desired(old)
	if err != nil {
		return nil, err
	}
	after, err := desired(written)
	if err != nil {
		return nil, err
	}

	var out []*unstructured.Unstructured
	add := func(b, a *unstructured.Unstructured) {
		if a == nil || b == nil {
			// A MachineDeployment the write adds or removes: a new one has no Machines
			// to replace, a removed one deletes its Machines (not a replacement).
			return
		}
		if ch := specPatch(b, a); ch != nil {
			out = append(out, ch)
		}
	}
	if before.ControlPlane != nil && after.ControlPlane != nil {
		add(before.ControlPlane.Object, after.ControlPlane.Object)
		add(before.ControlPlane.InfrastructureMachineTemplate, after.ControlPlane.InfrastructureMachineTemplate)
	}
	for name, a := range after.MachineDeployments {
		b, ok := before.MachineDeployments[name]
		if !ok || a == nil || b == nil {
			continue
		}
		bm, err := toUnstructured(b.Object, clusterv1.GroupVersion.WithKind("MachineDeployment"))
		if err != nil {
			return nil, err
		}
		am, err := toUnstructured(a.Object, clusterv1.GroupVersion.WithKind("MachineDeployment"))
		if err != nil {
			return nil, err
		}
		add(bm, am)
		add(b.BootstrapTemplate, a.BootstrapTemplate)
		add(b.InfrastructureMachineTemplate, a.InfrastructureMachineTemplate)
	}
	return out, nil
}

// specPatch is the change for preview.Apply that turns before's spec into after's,
// named as after; nil when the spec does not change.
func specPatch(before, after *unstructured.Unstructured) *unstructured.Unstructured {
	bs, _, _ := unstructured.NestedFieldNoCopy(before.Object, "spec")
	as, _, _ := unstructured.NestedFieldNoCopy(after.Object, "spec")
	if reflect.DeepEqual(bs, as) {
		return nil
	}
	b := &unstructured.Unstructured{Object: map[string]any{"spec": bs}}
	a := &unstructured.Unstructured{Object: map[string]any{"spec": as}}
	if bs == nil {
		b.Object = map[string]any{}
	}
	a.SetAPIVersion(after.GetAPIVersion())
	a.SetKind(after.GetKind())
	a.SetName(after.GetName())
	a.SetNamespace(after.GetNamespace())
	return Change(b, a)
}

// clusterState is the current state the generator starts from, read once and copied
// for each of the two computations (the generator may change what it is given).
type clusterState struct {
	controlPlane       *scope.ControlPlaneState
	machineDeployments scope.MachineDeploymentsStateMap
}

func (c clusterState) deepCopy(cluster *clusterv1.Cluster) *scope.ClusterState {
	out := &scope.ClusterState{Cluster: cluster, MachineDeployments: scope.MachineDeploymentsStateMap{}, MachinePools: scope.MachinePoolsStateMap{}}
	if c.controlPlane != nil {
		out.ControlPlane = &scope.ControlPlaneState{Object: c.controlPlane.Object.DeepCopy()}
		if c.controlPlane.InfrastructureMachineTemplate != nil {
			out.ControlPlane.InfrastructureMachineTemplate = c.controlPlane.InfrastructureMachineTemplate.DeepCopy()
		}
	}
	for k, md := range c.machineDeployments {
		cp := &scope.MachineDeploymentState{Object: md.Object.DeepCopy()}
		if md.BootstrapTemplate != nil {
			cp.BootstrapTemplate = md.BootstrapTemplate.DeepCopy()
		}
		if md.InfrastructureMachineTemplate != nil {
			cp.InfrastructureMachineTemplate = md.InfrastructureMachineTemplate.DeepCopy()
		}
		out.MachineDeployments[k] = cp
	}
	return out
}

// currentState is the topology controller's view of the Cluster's current objects,
// taken from the live Snapshot: the KubeadmControlPlane, the topology-owned
// MachineDeployments and their templates. The InfrastructureCluster is left out: the
// generator uses the current one only to carry its owner references over, which roll
// no Machine out.
func currentState(live preview.Snapshot) (clusterState, error) {
	var out clusterState
	if kcp := live.ControlPlane; kcp != nil {
		u, err := toUnstructured(kcp, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
		if err != nil {
			return clusterState{}, err
		}
		out.controlPlane = &scope.ControlPlaneState{Object: u, InfrastructureMachineTemplate: live.Objects[preview.RefKey(kcp.Spec.MachineTemplate.Spec.InfrastructureRef)]}
	}
	out.machineDeployments = scope.MachineDeploymentsStateMap{}
	for i := range live.MachineDeployments {
		md := &live.MachineDeployments[i]
		name, owned := md.Labels[clusterv1.ClusterTopologyMachineDeploymentNameLabel]
		if _, topology := md.Labels[clusterv1.ClusterTopologyOwnedLabel]; !topology || !owned {
			continue
		}
		out.machineDeployments[name] = &scope.MachineDeploymentState{
			Object:                        md,
			BootstrapTemplate:             live.Objects[preview.RefKey(md.Spec.Template.Spec.Bootstrap.ConfigRef)],
			InfrastructureMachineTemplate: live.Objects[preview.RefKey(md.Spec.Template.Spec.InfrastructureRef)],
		}
	}
	return out, nil
}

// blueprint reads the ClusterClass of cluster and the templates it references.
func blueprint(ctx context.Context, reader client.Reader, cluster *clusterv1.Cluster) (*scope.ClusterBlueprint, error) {
	key := cluster.GetClassKey()
	class := &clusterv1.ClusterClass{}
	if err := reader.Get(ctx, key, class); err != nil {
		return nil, fmt.Errorf("read ClusterClass %s: %w", key, err)
	}
	get := func(what string, ref *clusterv1.ClusterClassTemplateReference) (*unstructured.Unstructured, error) {
		if !ref.IsDefined() {
			return nil, nil
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
		if err := reader.Get(ctx, client.ObjectKey{Namespace: class.Namespace, Name: ref.Name}, u); err != nil {
			return nil, fmt.Errorf("read the %s %s %s of ClusterClass %s: %w", what, ref.Kind, ref.Name, key, err)
		}
		return u, nil
	}
	bp := &scope.ClusterBlueprint{
		Topology: cluster.Spec.Topology, ClusterClass: class,
		ControlPlane:       &scope.ControlPlaneBlueprint{HealthCheck: class.Spec.ControlPlane.HealthCheck},
		MachineDeployments: map[string]*scope.MachineDeploymentBlueprint{},
		MachinePools:       map[string]*scope.MachinePoolBlueprint{},
	}
	var err error
	if bp.InfrastructureClusterTemplate, err = get("infrastructure cluster template", &class.Spec.Infrastructure.TemplateRef); err != nil {
		return nil, err
	}
	if bp.ControlPlane.Template, err = get("control plane template", &class.Spec.ControlPlane.TemplateRef); err != nil {
		return nil, err
	}
	if bp.ControlPlane.InfrastructureMachineTemplate, err = get("control plane machine template", &class.Spec.ControlPlane.MachineInfrastructure.TemplateRef); err != nil {
		return nil, err
	}
	for i := range class.Spec.Workers.MachineDeployments {
		mdc := &class.Spec.Workers.MachineDeployments[i]
		b := &scope.MachineDeploymentBlueprint{HealthCheck: mdc.HealthCheck}
		mdc.Metadata.DeepCopyInto(&b.Metadata)
		if b.BootstrapTemplate, err = get("bootstrap template", &mdc.Bootstrap.TemplateRef); err != nil {
			return nil, err
		}
		if b.InfrastructureMachineTemplate, err = get("machine template", &mdc.Infrastructure.TemplateRef); err != nil {
			return nil, err
		}
		bp.MachineDeployments[mdc.Class] = b
	}
	if len(class.Spec.Workers.MachinePools) > 0 {
		return nil, fmt.Errorf("ClusterClass %s has MachinePools, which the guard does not plan", key)
	}
	return bp, nil
}

// readOnlyClient is the guard's reader with every write failing: the generator must
// not change anything (its writes are only on RuntimeSDK paths, which are off here).
type readOnlyClient struct{ client.Client }

func readOnly(c client.Client) client.Client { return readOnlyClient{c} }

func (readOnlyClient) Create(context.Context, client.Object, ...client.CreateOption) error {
	return errReadOnly
}
func (readOnlyClient) Update(context.Context, client.Object, ...client.UpdateOption) error {
	return errReadOnly
}
func (readOnlyClient) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return errReadOnly
}
func (readOnlyClient) Apply(context.Context, runtime.ApplyConfiguration, ...client.ApplyOption) error {
	return errReadOnly
}
func (readOnlyClient) Delete(context.Context, client.Object, ...client.DeleteOption) error {
	return errReadOnly
}
func (readOnlyClient) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return errReadOnly
}
func (readOnlyClient) Status() client.SubResourceWriter            { return readOnlySubResource{} }
func (readOnlyClient) SubResource(string) client.SubResourceClient { return readOnlySubResource{} }

type readOnlySubResource struct{}

func (readOnlySubResource) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	return errReadOnly
}
func (readOnlySubResource) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return errReadOnly
}
func (readOnlySubResource) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return errReadOnly
}
func (readOnlySubResource) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errReadOnly
}
func (readOnlySubResource) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return errReadOnly
}

// noClusterCache is the workload-cluster cache the generator is given: it reaches a
// workload cluster only for MachinePools, which blueprint refuses.
type noClusterCache struct{ clustercache.ClusterCache }

func (noClusterCache) GetClient(context.Context, client.ObjectKey) (client.Client, error) {
	return nil, errors.New("capi-inplace guard: no workload cluster access")
}

func toUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// derived returns topologyChanges for a write of a Cluster. A desired state that
// cannot be computed falls back to the Cluster write alone (its topology version,
// which preview.Apply moves to the KubeadmControlPlane and MachineDeployments): the
// topology controller cannot compute it either, so it derives nothing from the write,
// and what it derives later is judged at its own write of each object.
func (h *Handler) derived(ctx context.Context, reader client.Reader, live preview.Snapshot, old, written *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	oc, wc := &clusterv1.Cluster{}, &clusterv1.Cluster{}
	if err := fromUnstructured(old, oc); err != nil {
		return nil, err
	}
	if err := fromUnstructured(written, wc); err != nil {
		return nil, err
	}
	changes, err := topologyChanges(ctx, reader, live, oc, wc)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("Guard judged a topology write by its version only: the topology desired state could not be computed", "cluster", wc.Namespace+"/"+wc.Name, "reason", err.Error())
		return nil, nil
	}
	return changes, nil
}
