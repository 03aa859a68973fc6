package preview

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Input is everything Build decides from.
type Input struct {
	// Live is the Cluster as it is; Proposed is the Cluster with the change applied
	// (equal to Live when there is no change).
	Live     Snapshot
	Proposed Snapshot
	Planner  *planner.Planner
	Policy   *policy.Policy
	// Backends are the capabilities of the OS backends known before a node is asked;
	// a backend missing here (script) declares its capabilities on each node.
	Backends map[string]backend.Capabilities
	// Settings are the ExtensionConfig settings the hooks would be called with
	// (disableInPlaceUpdates makes the planner cover nothing); nil for none.
	Settings map[string]string
	// Now is the time rollout.after deadlines are compared with.
	Now time.Time
	// Change names the change file, if any; Notes come from Apply.
	Change string
	Notes  []string

	// memo is Build's own, for one plan.
	memo *planMemo
}

// comparison is what one Machine is compared with, and the result.
type comparison struct {
	owner, ownerKind string
	ownerAnnotations map[string]string
	path             string
	desiredVersion   string
	result           *planner.Result
	// blocked are reasons that make Cluster API replace the Machine whatever the
	// planner says (missing objects, ineligible Machine).
	blocked []string
	// rollout are the rollout settings (and Machine facts) that make Cluster API
	// surge or replace.
	rollout            []Cause
	curInfra, desInfra *unstructured.Unstructured
	// etcd is what the update does to a single-member local etcd's data; nil
	// for a worker, an external etcd or an etcd of several members.
	etcd *protocol.EtcdChange
	// desiredSpec is the desired KubeadmConfigSpec whose referenced Secrets the
	// CanUpdate hooks count, named by desiredSpecOf; nil when the desired
	// bootstrap object is not a kubeadm one.
	desiredSpec   *bootstrapv1.KubeadmConfigSpec
	desiredSpecOf string
}

// Build decides every Machine of the snapshot. Errors are about data the planner
// cannot read (malformed objects), never about a change it refuses.
func Build(in Input) (Report, error) {
	if in.Live.Cluster == nil || in.Proposed.Cluster == nil {
		return Report{}, errors.New("build plan: snapshot has no Cluster")
	}
	if in.Planner == nil || in.Policy == nil {
		return Report{}, errors.New("build plan: planner and policy are required")
	}
	in.memo = newPlanMemo()
	r := Report{
		APIVersion: ReportAPIVersion, Kind: ReportKind,
		Namespace: in.Live.Cluster.Namespace, Cluster: in.Live.Cluster.Name,
		Change: in.Change, Notes: slices.Clone(in.Notes), Machines: []MachinePlan{},
	}
	if in.Proposed.Cluster.Annotations[inplacev1.PausedAnnotation] == "true" {
		r.Notes = append(r.Notes, fmt.Sprintf("the Cluster is annotated %s=true: capi-inplace starts no node update until it is removed", inplacev1.PausedAnnotation))
	}
	nodes := nodeCount(in.Live.Machines)
	for i := range in.Live.Machines {
		m := &in.Live.Machines[i]
		if !m.DeletionTimestamp.IsZero() {
			r.Notes = append(r.Notes, fmt.Sprintf("Machine %s is being deleted and is left out", m.Name))
			continue
		}
		mp, err := buildMachine(in, m, nodes)
		if err != nil {
			return Report{}, fmt.Errorf("plan Machine %s: %w", m.Name, err)
		}
		if len(mp.SecretsNotFound) > 0 {
			if note := missingSecretsNote(mp.Owner, mp.SecretsNotFound); !slices.Contains(r.Notes, note) {
				r.Notes = append(r.Notes, note)
			}
		}
		r.Machines = append(r.Machines, mp)
	}
	slices.SortFunc(r.Machines, func(a, b MachinePlan) int {
		return cmp.Or(cmp.Compare(roleRank(a.Role), roleRank(b.Role)), cmp.Compare(a.Owner, b.Owner), cmp.Compare(a.Name, b.Name))
	})
	for _, m := range r.Machines {
		r.Summary.Machines++
		switch m.Verdict {
		case VerdictInPlace:
			r.Summary.InPlace++
		case VerdictReplace:
			r.Summary.Replace++
		default:
			r.Summary.Unchanged++
		}
	}
	return r, nil
}

func roleRank(role string) int {
	if role == RoleControlPlane {
		return 0
	}
	return 1
}

// nodeCount is how many nodes the workload cluster has, as the management cluster
// sees it: Machines with a node (all Machines while none has joined yet).
func nodeCount(machines []clusterv1.Machine) int {
	n, live := 0, 0
	for i := range machines {
		if !machines[i].DeletionTimestamp.IsZero() {
			continue
		}
		live++
		if machines[i].Status.NodeRef.IsDefined() {
			n++
		}
	}
	if n == 0 {
		return live
	}
	return n
}

func buildMachine(in Input, m *clusterv1.Machine, nodes int) (MachinePlan, error) {
	mp := MachinePlan{
		Name: m.Name, UID: string(m.UID), Role: RoleWorker, Node: m.Status.NodeRef.Name,
		Version: m.Spec.Version, DesiredVersion: m.Spec.Version, Verdict: VerdictUnchanged,
		Backend: Backend{Name: "none", Source: "none"},
	}
	if _, ok := m.Labels[clusterv1.MachineControlPlaneLabel]; ok {
		mp.Role = RoleControlPlane
	}
	owner := metav1.GetControllerOf(m)
	var (
		c   comparison
		err error
	)
	switch {
	case owner != nil && owner.Kind == "KubeadmControlPlane":
		c, err = compareControlPlaneMachine(in, m, owner.Name)
	case owner != nil && owner.Kind == "MachineSet":
		c, err = compareWorkerMachine(in, m, owner.Name)
	default:
		// A Machine no KubeadmControlPlane or MachineDeployment owns is rolled out by
		// nobody: there is nothing to compare it with.
		mp.Backend = backendFor(in, "", nil, imageResult{})
		return mp, nil
	}
	if err != nil {
		return MachinePlan{}, err
	}
	mp.Owner = c.owner
	if c.desiredVersion != "" {
		mp.DesiredVersion = c.desiredVersion
	}
	if c.result != nil {
		mp.Changes = c.result.Decisions
	}
	if len(mp.Changes) == 0 && len(c.blocked) == 0 {
		mp.Backend = backendFor(in, c.ownerKind, c.ownerAnnotations, imageResult{})
		return mp, nil
	}

	for _, b := range c.blocked {
		mp.Causes = append(mp.Causes, Cause{Kind: CauseMissingObject, Message: b})
	}
	mp.Causes = append(mp.Causes, c.rollout...)
	for _, d := range mp.Changes {
		if !d.Covered {
			mp.Causes = append(mp.Causes, Cause{Kind: CauseField, Message: refusal(d)})
		}
	}
	if len(mp.Causes) == 0 {
		// In place as far as the planner goes: the hooks then count the Secrets the
		// desired configuration references, as UpdateMachine would read them.
		over, missing, err := secretBudget(in, c)
		if err != nil {
			return MachinePlan{}, err
		}
		if over != nil {
			mp.Causes = append(mp.Causes, *over)
		}
		mp.SecretsNotFound = missing
	}
	for _, cause := range mp.Causes {
		mp.Reasons = append(mp.Reasons, cause.Message)
	}
	img := osImageChange(in, c.curInfra, c.desInfra)
	mp.OSImage = img.change
	if len(mp.Reasons) > 0 {
		mp.Verdict = VerdictReplace
		mp.Backend = backendFor(in, c.ownerKind, c.ownerAnnotations, imageResult{})
		if mp.Node != "" {
			mp.Drain = Drain{Needed: true, By: DrainByClusterAPI, Reason: "Cluster API drains the Machine's node before it deletes the Machine"}
		}
		return mp, nil
	}

	mp.Verdict = VerdictInPlace
	mp.Path = c.path
	mp.Drain = inPlaceDrain(in.Policy.Drain(), nodes)
	mp.Backend = backendFor(in, c.ownerKind, c.ownerAnnotations, img)
	mp.Reboot = reboot(in.Backends, img.backend)
	if img.backend != "" && mp.Reboot.Needed && mp.Version != mp.DesiredVersion {
		mp.ImageOrder = protocol.OrderImageAndKubernetes(mp.Role == RoleControlPlane, in.Policy.ListsKubernetesBinaries(mp.DesiredVersion))
	}
	if c.etcd != nil {
		restore, why := protocol.RestoreEtcdOnRollback(in.Policy.EtcdRestore(), *c.etcd)
		mp.EtcdOnRollback = &EtcdOnRollback{Restore: restore, Reason: why}
	}
	return mp, nil
}

// refusal is the reason of a refused decision, naming the object and field when the
// planner's reason does not.
func refusal(d planner.Decision) string {
	if strings.Contains(d.Reason, d.Field) {
		return d.Reason
	}
	return fmt.Sprintf("%s %s: %s", d.Object, d.Field, d.Reason)
}

func inPlaceDrain(p policy.Drain, nodes int) Drain {
	switch {
	case nodes > 1:
		return Drain{Needed: true, By: DrainByInPlace, Reason: fmt.Sprintf("cordoned and drained before the update (%d nodes)", nodes)}
	case p.SkipOnSingleNode:
		return Drain{Needed: false, By: DrainByInPlace, Reason: "the cluster's only node: cordoned, pods are not evicted (policy drain.skipOnSingleNode)"}
	default:
		return Drain{Needed: true, By: DrainByInPlace, Reason: "the cluster's only node: pods are evicted anyway (policy drain.skipOnSingleNode: false)"}
	}
}

func reboot(caps map[string]backend.Capabilities, name string) Reboot {
	if name == "" {
		return Reboot{Reason: "no OS image change: Kubernetes and kubeadm settings change without a reboot"}
	}
	c, known := caps[name]
	switch {
	case !known:
		return Reboot{Needed: true, Reason: fmt.Sprintf("backend %s declares its capabilities on each node: a reboot is assumed", name)}
	case c.NeedsReboot:
		return Reboot{Needed: true, Reason: fmt.Sprintf("backend %s switches the OS image at the next boot", name)}
	}
	return Reboot{Reason: fmt.Sprintf("backend %s applies the OS image without a reboot", name)}
}

// backendFor says which OS backend a Machine's node uses: for an OS image change the
// one the policy resolved (the artifact's own, else the cluster's); otherwise the
// owner's annotation, the Cluster's annotation, the policy's cluster entry or its
// default, in that order.
func backendFor(in Input, ownerKind string, ownerAnn map[string]string, img imageResult) Backend {
	ns, cluster := in.Live.Cluster.Namespace, in.Live.Cluster.Name
	if img.backend != "" {
		src := policySource(in.Policy, ns, cluster, img.backend)
		if a, ok := in.Policy.LookupArtifact(img.kind, img.value); ok && a.Backend != "" {
			src = "policy artifact"
		}
		return Backend{Name: img.backend, Source: src, Runs: true}
	}
	if b := ownerAnn[inplacev1.BackendAnnotation]; b != "" && ownerKind != "" {
		return Backend{Name: b, Source: ownerKind + " annotation"}
	}
	if b := in.Proposed.Cluster.Annotations[inplacev1.BackendAnnotation]; b != "" {
		return Backend{Name: b, Source: "Cluster annotation"}
	}
	if b := in.Policy.BackendFor(ns, cluster); b != "" {
		return Backend{Name: b, Source: policySource(in.Policy, ns, cluster, b)}
	}
	return Backend{Name: "none", Source: "none"}
}

func policySource(p *policy.Policy, ns, cluster, name string) string {
	// No cluster key is ever "/": BackendFor("", "") is the default.
	if p.BackendFor(ns, cluster) == name && p.BackendFor("", "") != name {
		return "policy cluster entry"
	}
	return "policy default"
}

// imageResult is an infrastructure OS image change and the backend it resolves to.
type imageResult struct {
	change *OSImageChange
	// kind is the infrastructure machine kind and value the new image value, as the
	// policy's artifact table looks them up.
	kind    string
	value   any
	backend string
}

func osImageChange(in Input, cur, des *unstructured.Unstructured) imageResult {
	if cur == nil || des == nil {
		return imageResult{}
	}
	gvk := des.GroupVersionKind()
	entry, template, ok := in.Policy.InfraKindFor(gvk.Group, gvk.Kind)
	if !ok || len(entry.ImagePaths) == 0 {
		return imageResult{}
	}
	path := append([]string{"spec"}, entry.ImagePaths[0]...)
	if template {
		path = append([]string{"spec", "template", "spec"}, entry.ImagePaths[0]...)
	}
	from, _, _ := unstructured.NestedFieldNoCopy(cur.Object, path...)
	to, found, _ := unstructured.NestedFieldNoCopy(des.Object, path...)
	fromStr, _ := policy.CanonicalImage(from)
	toStr, _ := policy.CanonicalImage(to)
	if !found || to == nil || fromStr == toStr {
		return imageResult{}
	}
	res := imageResult{change: &OSImageChange{Field: strings.Join(path, "."), From: fromStr, To: toStr}, kind: entry.Kind, value: to}
	img, _ := in.Policy.OSImageFor(entry.Kind, to, in.Live.Cluster.Namespace, in.Live.Cluster.Name)
	if img == nil {
		return res
	}
	res.change.Artifact, res.change.Digest, res.backend = img.Ref, img.Digest, img.Backend
	return res
}

// eligibility returns why Cluster API would not update a Machine in place whatever
// the planner says, from the Machine's own annotations.
func eligibility(m *clusterv1.Machine) []Cause {
	var out []Cause
	if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
		out = append(out, Cause{Kind: CauseMachineAnnotation, Message: fmt.Sprintf("Machine has annotation %s: Cluster API deletes it first", clusterv1.DeleteMachineAnnotation)})
	}
	if _, ok := m.Annotations[clusterv1.RemediateMachineAnnotation]; ok {
		out = append(out, Cause{Kind: CauseMachineAnnotation, Message: fmt.Sprintf("Machine has annotation %s: it is remediated by replacement", clusterv1.RemediateMachineAnnotation)})
	}
	return out
}

// isInitConfig is KCP's test for the KubeadmConfig of the first control-plane
// Machine (kubeadm init), which is compared a second time as an init config.
func isInitConfig(kc *bootstrapv1.KubeadmConfig) bool {
	return kc.Spec.JoinConfiguration.ControlPlane == nil && len(kc.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs) == 0
}
