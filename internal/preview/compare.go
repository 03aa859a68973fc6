package preview

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg/desiredstate"
	"sigs.k8s.io/cluster-api/util/collections"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Paths of Machines through the in-place machinery, in MachinePlan.Path.
const (
	PathKCP        = "KubeadmControlPlane: CanUpdateMachine"
	PathMD         = "MachineDeployment: CanUpdateMachineSet"
	PathSingleNode = "capi-inplace single-node control-plane path"
)

// kcpMinReplicasForMaxSurge0 is the smallest KubeadmControlPlane that KCP's webhook
// lets roll out with maxSurge 0.
const kcpMinReplicasForMaxSurge0 = 3

// compareControlPlaneMachine compares a KubeadmControlPlane Machine the way KCP does
// before it calls CanUpdateMachine: the Machine with KCP's version, the KubeadmConfig
// with the one KCP computes from its kubeadmConfigSpec (for a joining node, with
// version-derived feature gates), the InfraMachine with KCP's machine template.
func compareControlPlaneMachine(in Input, m *clusterv1.Machine, kcpName string) (comparison, error) {
	c := comparison{owner: "KubeadmControlPlane/" + kcpName, ownerKind: "KubeadmControlPlane", path: PathKCP}
	live, des := in.Live.ControlPlane, in.Proposed.ControlPlane
	if live == nil || des == nil || live.Name != kcpName {
		c.blocked = append(c.blocked, fmt.Sprintf("KubeadmControlPlane %s is not the Cluster's control plane or was not found", kcpName))
		return c, nil
	}
	c.ownerAnnotations = des.Annotations
	c.desiredVersion = des.Spec.Version
	c.desiredSpec, c.desiredSpecOf = &des.Spec.KubeadmConfigSpec, "KubeadmControlPlane "+des.Name+" kubeadmConfigSpec"
	c.rollout = append(eligibility(m), controlPlaneRollout(in, m)...)
	if ptr.Deref(des.Spec.Replicas, 1) < kcpMinReplicasForMaxSurge0 && optedIn(in.Proposed.Cluster, des) {
		c.path = PathSingleNode
	}

	curKCU := in.Live.Objects[RefKey(m.Spec.Bootstrap.ConfigRef)]
	curInfra := in.Live.Objects[RefKey(m.Spec.InfrastructureRef)]
	newTmpl := in.Proposed.Objects[RefKey(des.Spec.MachineTemplate.Spec.InfrastructureRef)]
	var missing []string
	if !m.Spec.Bootstrap.ConfigRef.IsDefined() || curKCU == nil || curKCU.GetKind() != "KubeadmConfig" {
		missing = append(missing, fmt.Sprintf("the Machine's KubeadmConfig %s was not found", m.Spec.Bootstrap.ConfigRef.Name))
	}
	if curInfra == nil {
		missing = append(missing, fmt.Sprintf("the Machine's %s was not found", RefKey(m.Spec.InfrastructureRef)))
	}
	if newTmpl == nil {
		missing = append(missing, fmt.Sprintf("the KubeadmControlPlane's %s was not found", RefKey(des.Spec.MachineTemplate.Spec.InfrastructureRef)))
	}
	if len(missing) > 0 {
		for _, s := range missing {
			c.blocked = append(c.blocked, s+": KCP cannot update the Machine in place without it")
		}
		return c, nil
	}

	curKC := &bootstrapv1.KubeadmConfig{}
	if err := fromUnstructured(&unstructured.Unstructured{Object: forComparison(curKCU.Object)}, curKC); err != nil {
		return c, err
	}
	desKC, err := desiredstate.ComputeDesiredKubeadmConfig(des, in.Proposed.Cluster, true, curKC.Name, curKC)
	if err != nil {
		return c, fmt.Errorf("compute KCP's desired KubeadmConfig: %w", err)
	}
	desKCDiff, curKCDiff := kcppkg.PrepareKubeadmConfigsForDiff(desKC, curKC, true)
	gvk := bootstrapv1.GroupVersion.WithKind("KubeadmConfig")
	curBoot, err := toUnstructured(curKCDiff, gvk)
	if err != nil {
		return c, err
	}
	desBoot, err := toUnstructured(desKCDiff, gvk)
	if err != nil {
		return c, err
	}

	c.curInfra = curInfra
	c.desInfra = desiredInfraMachine(curInfra, clonedFrom(in.Live, curInfra), newTmpl)
	c.etcd = singleMemberEtcdChange(m, des, curKC, desKC)

	// The planner compares specs: the Machine is converted without its status and
	// managed fields, and the desired one shares everything but spec.version.
	meta := m.ObjectMeta
	meta.ManagedFields = nil
	curMachine, err := toUnstructured(&clusterv1.Machine{ObjectMeta: meta, Spec: m.Spec}, clusterv1.GroupVersion.WithKind("Machine"))
	if err != nil {
		return c, err
	}
	desMachine := &unstructured.Unstructured{Object: maps.Clone(curMachine.Object)}
	desSpec, ok := curMachine.Object["spec"].(map[string]any)
	if !ok {
		return c, fmt.Errorf("machine %s has no spec", m.Name)
	}
	desSpec = maps.Clone(desSpec)
	desSpec["version"] = des.Spec.Version
	desMachine.Object["spec"] = desSpec

	res, err := in.Planner.CanUpdateMachine(in.Settings,
		planner.Objects{Machine: curMachine, Infrastructure: curInfra, Bootstrap: curBoot},
		planner.Objects{Machine: desMachine, Infrastructure: c.desInfra, Bootstrap: desBoot})
	if err != nil {
		return c, err
	}
	// KCP compares the first control-plane Machine's (kubeadm init) config a second
	// time as an init config and leaves it alone when that one matches.
	if isInitConfig(curKC) && slices.ContainsFunc(res.Decisions, func(d planner.Decision) bool { return d.Object == "KubeadmConfig" }) {
		desInit, err := desiredstate.ComputeDesiredKubeadmConfig(des, in.Proposed.Cluster, false, curKC.Name, curKC)
		if err != nil {
			return c, fmt.Errorf("compute KCP's desired init KubeadmConfig: %w", err)
		}
		d, cur := kcppkg.PrepareKubeadmConfigsForDiff(desInit, curKC, false)
		if reflect.DeepEqual(d.Spec, cur.Spec) {
			res.Decisions = slices.DeleteFunc(res.Decisions, func(d planner.Decision) bool { return d.Object == "KubeadmConfig" })
		}
	}
	c.result = res
	return c, nil
}

// controlPlaneRollout returns the KubeadmControlPlane settings that make KCP create
// a new Machine instead of updating in place.
func controlPlaneRollout(in Input, m *clusterv1.Machine) []Cause {
	kcp := in.Proposed.ControlPlane
	var out []Cause
	rollout := func(format string, args ...any) {
		out = append(out, Cause{Kind: CauseRollout, Message: fmt.Sprintf(format, args...)})
	}
	replicas := ptr.Deref(kcp.Spec.Replicas, 1)
	if replicas < kcpMinReplicasForMaxSurge0 {
		if !optedIn(in.Proposed.Cluster, kcp) {
			rollout("KubeadmControlPlane %s has %d replica(s): KCP allows maxSurge 0 only from %d replicas, so it creates a new control-plane Machine first; "+
				"annotate the Cluster or the KubeadmControlPlane with %s=true to update it in place", kcp.Name, replicas, kcpMinReplicasForMaxSurge0, inplacev1.SingleNodeControlPlaneAnnotation)
		}
	} else if surge := kcpMaxSurge(kcp.Spec.Rollout.Strategy.RollingUpdate.MaxSurge); surge != 0 {
		rollout("KubeadmControlPlane %s has rollout.strategy.rollingUpdate.maxSurge %d: KCP creates a new control-plane Machine before it considers in-place updates; set maxSurge: 0",
			kcp.Name, surge)
	}
	after := kcp.Spec.Rollout.After
	if !after.IsZero() && !in.Now.Before(after.Time) && m.CreationTimestamp.Before(&after) {
		rollout("KubeadmControlPlane %s rollout.after %s has passed: KCP replaces Machines created before it", kcp.Name, after.UTC().Format("2006-01-02T15:04:05Z"))
	}
	if unhealthy := unhealthyComponents(kcp, m); len(unhealthy) > 0 {
		out = append(out, Cause{Kind: CauseUnhealthyControlPlane, Message: fmt.Sprintf(
			"control-plane Machine %s is not healthy (%s): KCP scales an outdated Machine with unhealthy control-plane components down and creates a new one instead of updating it in-place; wait until it is healthy",
			m.Name, strings.Join(unhealthy, ", "))})
	}
	return out
}

// unhealthyComponents returns the control-plane component conditions that are False
// on m, when KCP's own filter (collections.HasUnhealthyControlPlaneComponents, which
// selectMachineForInPlaceUpdateOrScaleDown uses to pick the Machine it deletes) says
// the Machine is unhealthy.
func unhealthyComponents(kcp *controlplanev1.KubeadmControlPlane, m *clusterv1.Machine) []string {
	etcdManaged := !kcp.Spec.KubeadmConfigSpec.ClusterConfiguration.Etcd.External.IsDefined()
	if !collections.HasUnhealthyControlPlaneComponents(etcdManaged)(m) {
		return nil
	}
	var out []string
	for _, c := range m.Status.Conditions {
		if c.Status == metav1.ConditionFalse && slices.Contains(controlPlaneComponentConditions, c.Type) {
			out = append(out, c.Type+" "+c.Reason)
		}
	}
	return out
}

// controlPlaneComponentConditions are the Machine conditions KCP's health filter reads.
var controlPlaneComponentConditions = []string{
	controlplanev1.KubeadmControlPlaneMachineAPIServerPodHealthyCondition,
	controlplanev1.KubeadmControlPlaneMachineControllerManagerPodHealthyCondition,
	controlplanev1.KubeadmControlPlaneMachineSchedulerPodHealthyCondition,
	controlplanev1.KubeadmControlPlaneMachineEtcdPodHealthyCondition,
	controlplanev1.KubeadmControlPlaneMachineEtcdMemberHealthyCondition,
}

// optedIn reports whether a control plane opted into capi-inplace's single-node
// path, on the Cluster or on the KubeadmControlPlane itself (inplacev1.SingleNodeOptedIn:
// the rule of internal/singlenode, whose hold webhook and controller take the path).
// Both are the proposed objects: a write that adds or removes the opt-in is judged with
// it.
func optedIn(c *clusterv1.Cluster, kcp *controlplanev1.KubeadmControlPlane) bool {
	var kcpAnnotations map[string]string
	if kcp != nil {
		kcpAnnotations = kcp.Annotations
	}
	return inplacev1.SingleNodeOptedIn(c.Annotations, kcpAnnotations)
}

// kcpMaxSurge is KCP's maxSurge: 0 or 1, default 1.
func kcpMaxSurge(v *intstr.IntOrString) int {
	if v == nil {
		return 1
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 1, true)
	if err != nil {
		return 1
	}
	return n
}

// compareWorkerMachine compares a MachineDeployment Machine the way the
// MachineDeployment does before it calls CanUpdateMachineSet: the Machine's MachineSet
// and the templates it references with a MachineSet made from the MachineDeployment's
// template and the templates that references.
func compareWorkerMachine(in Input, m *clusterv1.Machine, msName string) (comparison, error) {
	c := comparison{path: PathMD}
	ms := in.Live.machineSet(msName)
	if ms == nil {
		c.owner = "MachineSet/" + msName
		c.blocked = append(c.blocked, fmt.Sprintf("the Machine's MachineSet %s was not found", msName))
		return c, nil
	}
	mdName := ms.Labels[clusterv1.MachineDeploymentNameLabel]
	if o := controllerOf(ms.OwnerReferences); o != nil && o.Kind == "MachineDeployment" {
		mdName = o.Name
	}
	if mdName == "" {
		// A MachineSet of its own is never rolled out: nothing to compare with.
		c.owner = "MachineSet/" + msName
		return c, nil
	}
	c.owner, c.ownerKind = "MachineDeployment/"+mdName, "MachineDeployment"
	md := in.Proposed.machineDeployment(mdName)
	if md == nil {
		c.blocked = append(c.blocked, fmt.Sprintf("the MachineSet's MachineDeployment %s was not found", mdName))
		return c, nil
	}
	c.ownerAnnotations = md.Annotations
	c.desiredVersion = md.Spec.Template.Spec.Version

	curSpec, desSpec := ms.Spec.Template.Spec, md.Spec.Template.Spec
	var curBoot, desBoot *unstructured.Unstructured
	var missing []string
	if ref := curSpec.Bootstrap.ConfigRef; ref.IsDefined() {
		if curBoot = in.Live.Objects[RefKey(ref)]; curBoot == nil {
			missing = append(missing, fmt.Sprintf("the MachineSet's %s was not found", RefKey(ref)))
		}
	}
	if ref := desSpec.Bootstrap.ConfigRef; ref.IsDefined() {
		if desBoot = in.Proposed.Objects[RefKey(ref)]; desBoot == nil {
			missing = append(missing, fmt.Sprintf("the MachineDeployment's %s was not found", RefKey(ref)))
		}
	}
	c.curInfra = in.Live.Objects[RefKey(curSpec.InfrastructureRef)]
	c.desInfra = in.Proposed.Objects[RefKey(desSpec.InfrastructureRef)]
	if c.curInfra == nil {
		missing = append(missing, fmt.Sprintf("the MachineSet's %s was not found", RefKey(curSpec.InfrastructureRef)))
	}
	if c.desInfra == nil {
		missing = append(missing, fmt.Sprintf("the MachineDeployment's %s was not found", RefKey(desSpec.InfrastructureRef)))
	}
	if len(missing) > 0 {
		for _, s := range missing {
			c.blocked = append(c.blocked, s+": the MachineDeployment cannot update the Machine in place without it")
		}
		return c, nil
	}

	spec, err := templateSpec(desBoot)
	if err != nil {
		return c, err
	}
	if spec != nil {
		c.desiredSpec, c.desiredSpecOf = spec, desBoot.GetKind()+" "+desBoot.GetName()
	}

	curMS, desMS, err := in.memo.machineSetPair(ms, md)
	if err != nil {
		return c, err
	}

	res, err := in.Planner.CanUpdateMachineSet(in.Settings,
		planner.Objects{Machine: curMS, Infrastructure: c.curInfra, Bootstrap: curBoot},
		planner.Objects{Machine: desMS, Infrastructure: c.desInfra, Bootstrap: desBoot})
	if err != nil {
		return c, err
	}
	c.result = res
	c.rollout = machineDeploymentRollout(md, m)
	return c, nil
}

// planMemo holds what one Build converts once and compares for several Machines: a
// MachineSet's Machines share its comparison objects. The planner only reads the
// objects it is given (preview hands it the snapshot's own objects too), so one copy
// serves every Machine.
type planMemo struct {
	machineSets map[string][2]*unstructured.Unstructured
}

func newPlanMemo() *planMemo {
	return &planMemo{machineSets: map[string][2]*unstructured.Unstructured{}}
}

// machineSetPair returns the MachineSet as CanUpdateMachineSet's current object and
// the desired one: the MachineSet with the MachineDeployment's template.
func (pm *planMemo) machineSetPair(ms *clusterv1.MachineSet, md *clusterv1.MachineDeployment) (cur, des *unstructured.Unstructured, err error) {
	key := ms.Name + "/" + md.Name
	if p, ok := pm.machineSets[key]; ok {
		return p[0], p[1], nil
	}
	// Without status and managed fields, which no comparison reads.
	meta := ms.ObjectMeta
	meta.ManagedFields = nil
	if cur, err = toUnstructured(&clusterv1.MachineSet{ObjectMeta: meta, Spec: ms.Spec}, clusterv1.GroupVersion.WithKind("MachineSet")); err != nil {
		return nil, nil, err
	}
	// Only the template is taken from the MachineDeployment: convert just that.
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&md.Spec.Template)
	if err != nil {
		return nil, nil, fmt.Errorf("convert MachineDeployment %s template to unstructured: %w", md.Name, err)
	}
	des = cur.DeepCopy()
	des.Object["spec"].(map[string]any)["template"] = tmpl
	pm.machineSets[key] = [2]*unstructured.Unstructured{cur, des}
	return cur, des, nil
}

// machineDeploymentRollout returns the MachineDeployment settings (and Machine
// facts) that make Cluster API create a new Machine instead of moving this one.
func machineDeploymentRollout(md *clusterv1.MachineDeployment, m *clusterv1.Machine) []Cause {
	var out []Cause
	rollout := func(format string, args ...any) {
		out = append(out, Cause{Kind: CauseRollout, Message: fmt.Sprintf(format, args...)})
	}
	strategy := md.Spec.Rollout.Strategy
	if strategy.Type == clusterv1.OnDeleteMachineDeploymentStrategyType {
		rollout("MachineDeployment %s uses rollout strategy OnDelete, which never updates in place: a new Machine replaces each one you delete", md.Name)
	} else {
		replicas := ptr.Deref(md.Spec.Replicas, 1)
		unavailable := 0
		if v := strategy.RollingUpdate.MaxUnavailable; v != nil {
			if n, err := intstr.GetScaledValueFromIntOrPercent(v, int(replicas), false); err == nil {
				unavailable = n
			}
		}
		if unavailable == 0 {
			rollout("MachineDeployment %s has rollout.strategy.rollingUpdate.maxUnavailable 0: Cluster API first creates a new Machine and later deletes an old one; set maxUnavailable to at least 1", md.Name)
		}
	}
	if !m.Status.NodeRef.IsDefined() {
		out = append(out, Cause{Kind: CauseNoNode, Message: "the Machine has no node yet: Cluster API moves only Machines with a node to the new MachineSet"})
	}
	return out
}

// clonedFrom returns the template an infrastructure machine was cloned from, when
// its annotations name one the snapshot holds.
func clonedFrom(s Snapshot, infra *unstructured.Unstructured) *unstructured.Unstructured {
	ann := infra.GetAnnotations()
	name, gk := ann[clusterv1.TemplateClonedFromNameAnnotation], ann[clusterv1.TemplateClonedFromGroupKindAnnotation]
	if name == "" || gk == "" {
		return nil
	}
	for k, v := range s.Objects {
		if k.Name == name && k.Kind+"."+k.Group == gk {
			return v
		}
	}
	return nil
}

// desiredInfraMachine approximates the InfraMachine KCP would apply from a new
// template (KCP normalizes with a server-side-apply dry run, which plan does not
// issue): the current object with the new template's spec merged over it, minus the
// fields the old template set and the new one does not. Fields set by the provider's
// controller (providerID, ...) stay, as they do under server-side apply.
//
// Only spec is copied (and changed); the rest is shared with cur, less its status and
// managed fields, which no comparison reads.
func desiredInfraMachine(cur, oldTmpl, newTmpl *unstructured.Unstructured) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: forComparison(cur.Object)}
	spec, _ := runtime.DeepCopyJSONValue(cur.Object["spec"]).(map[string]any)
	if spec == nil {
		spec = map[string]any{}
	}
	out.Object["spec"] = spec
	newSpec, _, _ := unstructured.NestedMap(newTmpl.Object, "spec", "template", "spec")
	if oldTmpl != nil {
		oldSpec, _, _ := unstructured.NestedMap(oldTmpl.Object, "spec", "template", "spec")
		removeDropped(spec, oldSpec, newSpec)
	}
	mergeInto(spec, newSpec)
	return out
}

// forComparison returns a shallow copy of obj without status and
// metadata.managedFields: the planner compares specs, and KCP's desired-state
// functions read a KubeadmConfig's name, UID and owner references. Objects read from
// an API server carry both (the guard's cache too); converting or copying them is work
// that informs no decision.
func forComparison(obj map[string]any) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != "status" {
			out[k] = v
		}
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		if _, has := meta["managedFields"]; has {
			meta = maps.Clone(meta)
			delete(meta, "managedFields")
			out["metadata"] = meta
		}
	}
	return out
}

// removeDropped deletes from target what old has and new does not.
func removeDropped(target, old, new map[string]any) {
	for k, ov := range old {
		nv, inNew := new[k]
		if !inNew {
			delete(target, k)
			continue
		}
		om, ok1 := ov.(map[string]any)
		nm, ok2 := nv.(map[string]any)
		tm, ok3 := target[k].(map[string]any)
		if ok1 && ok2 && ok3 {
			removeDropped(tm, om, nm)
		}
	}
}

func controllerOf(refs []metav1.OwnerReference) *metav1.OwnerReference {
	for i := range refs {
		if ptr.Deref(refs[i].Controller, false) {
			return &refs[i]
		}
	}
	return nil
}

// singleMemberEtcdChange is what the update of a control-plane Machine does to
// its local etcd's data, as the agent judges it (the Machine's version before,
// the etcd image tags its ClusterConfiguration and the desired one name); nil
// unless the control plane has one member with a local etcd.
func singleMemberEtcdChange(m *clusterv1.Machine, des *controlplanev1.KubeadmControlPlane, cur, desired *bootstrapv1.KubeadmConfig) *protocol.EtcdChange {
	if ptr.Deref(des.Spec.Replicas, 1) != 1 || desired.Spec.ClusterConfiguration.Etcd.External.IsDefined() {
		return nil
	}
	return &protocol.EtcdChange{FromVersion: m.Spec.Version, ToVersion: des.Spec.Version,
		FromEtcdImageTag: cur.Spec.ClusterConfiguration.Etcd.Local.ImageTag, ToEtcdImageTag: desired.Spec.ClusterConfiguration.Etcd.Local.ImageTag}
}
