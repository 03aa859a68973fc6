package preview

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/exp/topology/desiredstate"
	"sigs.k8s.io/cluster-api/exp/topology/scope"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
)

// errReadOnly is what the desired-state generator gets if it ever tries to write: the
// preview only computes, and Cluster API's RuntimeSDK paths (lifecycle hooks, which
// write their pending marks on the Cluster) are off in this process.
var errReadOnly = errors.New("capi-inplace preview: the topology desired state is computed read-only")

// ChainedUpgrades answers, in process, the GenerateUpgradePlan runtime extension that a
// ClusterClass names (spec.upgrade.external.generateUpgradePlanExtension) when it is
// capi-inplace's own: the same planner.UpgradePlan the hook answers Cluster API with,
// so the preview steps through the versions Cluster API will write.
type ChainedUpgrades struct {
	// Planner is the extension's planner (its policy's kubernetesBinaries join the
	// class's versions, as in the hook). Required.
	Planner *planner.Planner
	// Extension is the name a ClusterClass gives the hook: "<handler>.<ExtensionConfig
	// name>" (generate-upgrade-plan.capi-inplace with the shipped manifests).
	Extension string
	// Settings are the ExtensionConfig settings Cluster API passes the hooks
	// (disableInPlaceUpdates leaves the workers' plan to Cluster API).
	Settings map[string]string
	// AssumeOptedIn skips reading the Cluster's namespace: the admission guard is only
	// sent writes of namespaces labelled inplace.capi-inplace.dev/enabled=true.
	AssumeOptedIn bool
}

// TopologyFallbackError is why the topology controller's writes could not be derived
// from a Cluster.spec.topology change (external patches or another GenerateUpgradePlan
// extension, which need Cluster API's RuntimeSDK; a ClusterClass or template that
// cannot be read; MachinePools): the change is then planned by its version alone.
type TopologyFallbackError struct{ Err error }

func (e *TopologyFallbackError) Error() string {
	return "the topology controller's writes could not be computed (" + e.Err.Error() + "): the Cluster change is planned by its topology version alone"
}

func (e *TopologyFallbackError) Unwrap() error { return e.Err }

// topologyChanges returns the writes the topology controller derives from a change of
// Cluster.spec.topology: for the Cluster's KubeadmControlPlane, its infrastructure
// machine template and each topology-owned MachineDeployment with its bootstrap and
// infrastructure templates, a merge patch of spec from the desired state of the stored
// Cluster to the desired state of the changed one. Both are computed by Cluster API's
// own desired-state generator (exp/topology/desiredstate, the code of the topology
// controller: ClusterClass templates, variables, inline patches and the upgrade plan)
// over the same current objects, so the patches hold exactly what the topology
// controller's next write changes: for a chained upgrade, its first step (each later
// step is its own write of the KubeadmControlPlane or MachineDeployment). Templates keep
// their current names: Apply plans a template changed under its name as rotated, which
// is what the topology controller then does.
//
// derived is false for a Cluster without a ClusterClass on either side. An error means
// the desired state could not be computed.
func (g Gatherer) topologyChanges(ctx context.Context, live Snapshot, old, changed *clusterv1.Cluster) (changes []*unstructured.Unstructured, derived bool, err error) {
	if !changed.Spec.Topology.IsDefined() || !old.Spec.Topology.IsDefined() {
		return nil, false, nil
	}
	c, ok := g.Reader.(client.Client)
	if !ok {
		return nil, false, errors.New("the reader is not a client.Client, which Cluster API's desired-state generator needs")
	}
	gen, err := desiredstate.NewGenerator(readOnly(c), noClusterCache{}, nil, nil, nil)
	if err != nil {
		return nil, false, fmt.Errorf("topology desired-state generator: %w", err)
	}
	current, err := currentState(live)
	if err != nil {
		return nil, false, err
	}
	// desired returns the desired state and the workers' upgrade plan.
	desired := func(cluster *clusterv1.Cluster) (*scope.ClusterState, []string, error) {
		bp, err := blueprint(ctx, g.Reader, cluster)
		if err != nil {
			return nil, nil, err
		}
		var workers []string
		hook := bp.ClusterClass.Spec.Upgrade.External.GenerateUpgradePlanExtension != ""
		if bp.ClusterClass, workers, err = g.upgradePlanClass(ctx, cluster, bp, current); err != nil {
			return nil, nil, err
		}
		s := scope.New(cluster.DeepCopy())
		s.Blueprint = bp
		s.Current = current.deepCopy(s.Current.Cluster)
		d, err := gen.Generate(ctx, s)
		if err != nil {
			return nil, nil, fmt.Errorf("compute the topology desired state of Cluster %s/%s (class %s): %w", cluster.Namespace, cluster.Name, cluster.GetClassKey(), err)
		}
		if !hook {
			workers = s.UpgradeTracker.MachineDeployments.UpgradePlan
		}
		return d, workers, nil
	}
	before, _, err := desired(old)
	if err != nil {
		return nil, false, err
	}
	after, workersPlan, err := desired(changed)
	if err != nil {
		return nil, false, err
	}

	var out []*unstructured.Unstructured
	add := func(b, a *unstructured.Unstructured) {
		if a == nil || b == nil {
			// A MachineDeployment the change adds or removes: a new one has no Machines
			// to replace, a removed one deletes its Machines (not a replacement).
			return
		}
		if ch := desiredPatch(b, a); ch != nil {
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
			return nil, false, err
		}
		am, err := toUnstructured(a.Object, clusterv1.GroupVersion.WithKind("MachineDeployment"))
		if err != nil {
			return nil, false, err
		}
		add(bm, am)
		add(b.BootstrapTemplate, a.BootstrapTemplate)
		add(b.InfrastructureMachineTemplate, a.InfrastructureMachineTemplate)
		// A MachineDeployment waits for the control plane: the topology controller
		// writes its first step of the workers' plan later, at the Cluster's change;
		// judge that step now, at the write that causes it.
		if cur := a.Object.Spec.Template.Spec.Version; len(workersPlan) > 0 && cur == b.Object.Spec.Template.Spec.Version &&
			cur != workersPlan[0] && cur != changed.Spec.Topology.Version {
			step := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"version": workersPlan[0]}}}}}
			step.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineDeployment"))
			step.SetName(a.Object.Name)
			step.SetNamespace(a.Object.Namespace)
			out = append(out, step)
		}
	}
	return out, true, nil
}

// upgradePlanClass returns the ClusterClass the generator is given. A class that names
// a GenerateUpgradePlan extension makes the generator call it through the RuntimeSDK,
// which this process does not run; when the extension is capi-inplace's own, its plan
// is computed here (desiredstate.ComputeUpgradePlan with ChainedUpgrades, the inputs
// Cluster API passes the hook, and Cluster API's own validation of the answer) and the
// generator gets a copy of the class that lists the control plane's plan as its
// kubernetesVersions: Cluster API then steps the control plane through exactly those
// versions. It also returns the hook's workers' plan (the generator itself gets Cluster
// API's default, which moves workers the same way unless they lag behind the control
// plane when the change is written; those MachineDeployment writes are judged at their
// own write).
func (g Gatherer) upgradePlanClass(ctx context.Context, cluster *clusterv1.Cluster, bp *scope.ClusterBlueprint, current clusterState) (*clusterv1.ClusterClass, []string, error) {
	class := bp.ClusterClass
	ext := class.Spec.Upgrade.External.GenerateUpgradePlanExtension
	if ext == "" {
		return class, nil, nil
	}
	if g.Upgrades == nil || g.Upgrades.Planner == nil || ext != g.Upgrades.Extension {
		return nil, nil, fmt.Errorf("ClusterClass %s names the GenerateUpgradePlan extension %q, which only Cluster API's RuntimeSDK can call", client.ObjectKeyFromObject(class), ext)
	}
	optedIn := g.Upgrades.AssumeOptedIn
	if !optedIn {
		ns := &corev1.Namespace{}
		if err := g.Reader.Get(ctx, client.ObjectKey{Name: cluster.Namespace}, ns); err != nil {
			return nil, nil, fmt.Errorf("read namespace %s for the upgrade plan: %w", cluster.Namespace, err)
		}
		optedIn = ns.Labels[inplacev1.NamespaceEnabledLabel] == "true"
	}
	s := scope.New(cluster.DeepCopy())
	s.Blueprint = bp
	s.Current = current.deepCopy(s.Current.Cluster)
	plan := func(_ context.Context, desired, controlPlane, minWorkers string) ([]string, []string, error) {
		p, err := g.Upgrades.Planner.UpgradePlan(planner.ChainedUpgradeInput(controlPlane, minWorkers, desired, class.Spec.KubernetesVersions, optedIn, g.Upgrades.Settings))
		if err != nil {
			return nil, nil, fmt.Errorf("GenerateUpgradePlan %s: %w", ext, err)
		}
		return p.ControlPlane, p.Workers, nil
	}
	if err := desiredstate.ComputeUpgradePlan(ctx, s, plan); err != nil {
		return nil, nil, err
	}
	out := class.DeepCopy()
	out.Spec.Upgrade.External.GenerateUpgradePlanExtension = ""
	out.Spec.KubernetesVersions = slices.Clone(s.UpgradeTracker.ControlPlane.UpgradePlan)
	return out, s.UpgradeTracker.MachineDeployments.UpgradePlan, nil
}

// desiredPatch is the change for Apply that turns before's desired state into
// after's, named as after: the spec, and the labels and annotations the generator
// sets (for the KubeadmControlPlane, spec.topology.controlPlane.metadata merged with
// the ClusterClass's controlPlane.metadata, applied in the same server-side apply as
// the spec: a single-node opt-in written there arrives on the KubeadmControlPlane with
// the version change). Labels and annotations are patched key by key, so that those
// other writers set on the live object stay, as they do under server-side apply. nil
// when nothing changes.
func desiredPatch(before, after *unstructured.Unstructured) *unstructured.Unstructured {
	b, a := desiredFields(before), desiredFields(after)
	if reflect.DeepEqual(b, a) {
		return nil
	}
	u := &unstructured.Unstructured{Object: MergePatch(b, a)}
	u.SetAPIVersion(after.GetAPIVersion())
	u.SetKind(after.GetKind())
	u.SetName(after.GetName())
	u.SetNamespace(after.GetNamespace())
	return u
}

// desiredFields are the parts of a desired object desiredPatch compares: spec (when
// set) and metadata labels and annotations (always maps, possibly empty, so that the
// merge patch removes single keys and never a whole map).
func desiredFields(u *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	if spec, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec"); ok && spec != nil {
		out["spec"] = spec
	}
	meta := map[string]any{}
	for _, k := range []string{"labels", "annotations"} {
		m, _, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", k)
		if m, ok := m.(map[string]any); ok {
			meta[k] = m
		} else {
			meta[k] = map[string]any{}
		}
	}
	out["metadata"] = meta
	return out
}

// MergePatch is the JSON merge patch (RFC 7386) that turns old into new: new's value
// where it differs, a nested patch where both are maps, null where new has no key.
func MergePatch(old, new map[string]any) map[string]any {
	out := map[string]any{}
	for k, nv := range new {
		ov, inOld := old[k]
		if inOld && reflect.DeepEqual(ov, nv) {
			continue
		}
		om, oldIsMap := ov.(map[string]any)
		nm, newIsMap := nv.(map[string]any)
		if inOld && oldIsMap && newIsMap {
			out[k] = MergePatch(om, nm)
			continue
		}
		out[k] = nv
	}
	for k := range old {
		if _, inNew := new[k]; !inNew {
			out[k] = nil
		}
	}
	return out
}

// clusterState is the current state the generator starts from, read once and copied
// for each computation (the generator may change what it is given).
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
func currentState(live Snapshot) (clusterState, error) {
	var out clusterState
	if kcp := live.ControlPlane; kcp != nil {
		u, err := toUnstructured(kcp, controlplanev1.GroupVersion.WithKind("KubeadmControlPlane"))
		if err != nil {
			return clusterState{}, err
		}
		out.controlPlane = &scope.ControlPlaneState{Object: u, InfrastructureMachineTemplate: live.Objects[RefKey(kcp.Spec.MachineTemplate.Spec.InfrastructureRef)]}
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
			BootstrapTemplate:             live.Objects[RefKey(md.Spec.Template.Spec.Bootstrap.ConfigRef)],
			InfrastructureMachineTemplate: live.Objects[RefKey(md.Spec.Template.Spec.InfrastructureRef)],
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
		return nil, fmt.Errorf("ClusterClass %s has MachinePools, which the preview does not plan", key)
	}
	return bp, nil
}

// readOnlyClient is the reader with every write failing: the generator must not
// change anything (its writes are only on RuntimeSDK paths, which are off here).
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
	return nil, errors.New("capi-inplace preview: no workload cluster access")
}
