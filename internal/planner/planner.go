package planner

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// ErrMalformed is wrapped by every error about a request that does not have the
// shape CAPI sends: a missing or mistyped object, an object of the wrong kind for
// its slot. The extension answers such requests with status Failure.
var ErrMalformed = errors.New("malformed request")

// Objects are one side (current or desired) of a CanUpdate request, as JSON
// objects.
type Objects struct {
	// Machine is the Machine (CanUpdateMachine) or MachineSet (CanUpdateMachineSet).
	Machine *unstructured.Unstructured
	// Infrastructure is the InfraMachine or the InfraMachineTemplate.
	Infrastructure *unstructured.Unstructured
	// Bootstrap is the KubeadmConfig or KubeadmConfigTemplate; nil when the machine
	// has no bootstrap config.
	Bootstrap *unstructured.Unstructured
}

// Decision is the verdict on one differing field.
type Decision struct {
	// Object is the kind of the object the field belongs to.
	Object string `json:"object"`
	// Field is the field's dotted path from the object's root.
	Field string `json:"field"`
	// Covered is true when the field is patched and applied in place.
	Covered bool `json:"covered"`
	// Reason says how the change is applied, or why it cannot be.
	Reason string `json:"reason"`
}

// Result is the planner's answer to one CanUpdate request.
type Result struct {
	// MachinePatch, InfrastructurePatch and BootstrapPatch are RFC 6902 patches
	// (JSON arrays) for the Machine/MachineSet, the infrastructure object and the
	// bootstrap object, with whole-object paths; nil when nothing is patched.
	MachinePatch        []byte
	InfrastructurePatch []byte
	BootstrapPatch      []byte
	// Decisions has one entry per differing field, in a stable order.
	Decisions []Decision
}

// FullyCovered reports whether every difference is covered, i.e. whether CAPI will
// update the machine in place.
func (r *Result) FullyCovered() bool {
	return !slices.ContainsFunc(r.Decisions, func(d Decision) bool { return !d.Covered })
}

// Refused returns the decisions that are not covered.
func (r *Result) Refused() []Decision {
	var out []Decision
	for _, d := range r.Decisions {
		if !d.Covered {
			out = append(out, d)
		}
	}
	return out
}

// Planner decides CanUpdate requests under a policy. It is safe for concurrent use.
type Planner struct {
	policy  *policy.Policy
	kubeadm []kubeadmRule
}

// New returns a Planner for a policy.
func New(p *policy.Policy) (*Planner, error) {
	if p == nil {
		return nil, errors.New("planner needs a policy")
	}
	return &Planner{policy: p, kubeadm: kubeadmRules()}, nil
}

// shape is what differs between the Machine hook and the MachineSet hook.
type shape struct {
	hook           string
	machineKind    string   // Machine or MachineSet
	machineBase    []string // where the machine spec compared by CAPI sits
	objectBase     []string // where the infra/bootstrap spec compared by CAPI sits
	template       bool     // infra and bootstrap objects are templates
	bootstrapKind  string   // KubeadmConfig or KubeadmConfigTemplate
	infraSlot      string   // field names as in the hook request, for messages
	bootstrapSlot  string
	machineSlot    string
	machineVersion string // apiVersion of Machine/MachineSet
}

// machineShape is the shape of CanUpdateMachine requests.
func machineShape() shape {
	return shape{
		hook: "CanUpdateMachine", machineKind: "Machine",
		machineBase: []string{"spec"}, objectBase: []string{"spec"},
		bootstrapKind: "KubeadmConfig",
		machineSlot:   "machine", infraSlot: "infrastructureMachine", bootstrapSlot: "bootstrapConfig",
		machineVersion: "cluster.x-k8s.io/v1beta2",
	}
}

// machineSetShape is the shape of CanUpdateMachineSet requests.
func machineSetShape() shape {
	return shape{
		hook: "CanUpdateMachineSet", machineKind: "MachineSet",
		machineBase: []string{"spec", "template", "spec"}, objectBase: []string{"spec", "template", "spec"},
		template: true, bootstrapKind: "KubeadmConfigTemplate",
		machineSlot: "machineSet", infraSlot: "infrastructureMachineTemplate", bootstrapSlot: "bootstrapConfigTemplate",
		machineVersion: "cluster.x-k8s.io/v1beta2",
	}
}

// CanUpdateMachine plans a CanUpdateMachine request (KubeadmControlPlane machines).
func (p *Planner) CanUpdateMachine(settings map[string]string, current, desired Objects) (*Result, error) {
	return p.plan(machineShape(), settings, current, desired)
}

// CanUpdateMachineSet plans a CanUpdateMachineSet request (MachineDeployments).
func (p *Planner) CanUpdateMachineSet(settings map[string]string, current, desired Objects) (*Result, error) {
	return p.plan(machineSetShape(), settings, current, desired)
}

// part is one object of a request pair, with its compared spec.
type part struct {
	cur, des         map[string]any
	curSpec, desSpec map[string]any
	base             []string
	covered          []fieldPath // full paths
}

func (p *Planner) plan(s shape, settings map[string]string, current, desired Objects) (*Result, error) {
	if err := s.validate(current, desired); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", s.hook, ErrMalformed, err)
	}
	machine, err := newPart(current.Machine, desired.Machine, s.machineBase, "current."+s.machineSlot, "desired."+s.machineSlot)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", s.hook, ErrMalformed, err)
	}
	infra, err := newPart(current.Infrastructure, desired.Infrastructure, s.objectBase, "current."+s.infraSlot, "desired."+s.infraSlot)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", s.hook, ErrMalformed, err)
	}
	res := &Result{}

	versionCovered := p.planMachine(s, machine, res)

	bp, err := p.planBootstrap(s, current.Bootstrap, desired.Bootstrap, versionCovered, res)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.hook, err)
	}
	if bp != nil {
		if res.BootstrapPatch, err = makePatch(bp.cur, bp.des, bp.covered, len(bp.base)); err != nil {
			return nil, fmt.Errorf("%s: bootstrap patch: %w", s.hook, err)
		}
	}

	clusterName, _ := lookup(machine.des, []string{"spec", "clusterName"})
	clusterStr, _ := clusterName.(string)
	p.planInfrastructure(current.Infrastructure, desired.Infrastructure, s, infra, desired.Machine.GetNamespace(), clusterStr, res)
	if desired.Bootstrap != nil {
		p.planDeclaredImage(desired.Bootstrap.GetKind(), bp, desired.Machine.GetNamespace(), clusterStr, res)
	}

	if res.MachinePatch, err = makePatch(machine.cur, machine.des, machine.covered, len(machine.base)); err != nil {
		return nil, fmt.Errorf("%s: machine patch: %w", s.hook, err)
	}
	if res.InfrastructurePatch, err = makePatch(infra.cur, infra.des, infra.covered, len(infra.base)); err != nil {
		return nil, fmt.Errorf("%s: infrastructure patch: %w", s.hook, err)
	}

	if disabled(settings) {
		// Upstream's suites register extensions of our kind with this setting and
		// expect ordinary (replacing) rollouts: cover nothing, but still say what
		// differed.
		res.MachinePatch, res.InfrastructurePatch, res.BootstrapPatch = nil, nil, nil
		for i := range res.Decisions {
			res.Decisions[i].Covered = false
			res.Decisions[i].Reason = fmt.Sprintf("in-place updates are disabled by the ExtensionConfig setting %s=true", inplacev1.SettingDisableInPlaceUpdates)
		}
	}
	return res, nil
}

func disabled(settings map[string]string) bool {
	return strings.EqualFold(strings.TrimSpace(settings[inplacev1.SettingDisableInPlaceUpdates]), "true")
}

// validate checks that each slot holds an object of the kind CAPI puts there.
func (s shape) validate(current, desired Objects) error {
	var errs []error
	for _, side := range []struct {
		name string
		o    Objects
	}{{"current", current}, {"desired", desired}} {
		m := side.o.Machine
		switch {
		case m == nil:
			errs = append(errs, fmt.Errorf("%s.%s is missing", side.name, s.machineSlot))
		case m.GetKind() != s.machineKind || m.GetAPIVersion() != s.machineVersion:
			errs = append(errs, fmt.Errorf("%s.%s has apiVersion %q kind %q, expected %s %s",
				side.name, s.machineSlot, m.GetAPIVersion(), m.GetKind(), s.machineVersion, s.machineKind))
		}
		in := side.o.Infrastructure
		switch {
		case in == nil:
			errs = append(errs, fmt.Errorf("%s.%s is missing", side.name, s.infraSlot))
		case in.GetKind() == "" || in.GetAPIVersion() == "":
			errs = append(errs, fmt.Errorf("%s.%s has no apiVersion or kind", side.name, s.infraSlot))
		case s.template != strings.HasSuffix(in.GetKind(), policy.TemplateSuffix):
			errs = append(errs, fmt.Errorf("%s.%s has kind %q, expected %s", side.name, s.infraSlot, in.GetKind(), expectTemplate(s.template)))
		}
		if b := side.o.Bootstrap; b != nil {
			switch {
			case b.GetKind() == "" || b.GetAPIVersion() == "":
				errs = append(errs, fmt.Errorf("%s.%s has no apiVersion or kind", side.name, s.bootstrapSlot))
			case s.template != strings.HasSuffix(b.GetKind(), policy.TemplateSuffix):
				errs = append(errs, fmt.Errorf("%s.%s has kind %q, expected %s", side.name, s.bootstrapSlot, b.GetKind(), expectTemplate(s.template)))
			}
		}
	}
	return errors.Join(errs...)
}

func expectTemplate(template bool) string {
	if template {
		return "a template kind (…Template)"
	}
	return "a machine kind, not a template"
}

// newPart extracts the compared specs of an object pair.
func newPart(cur, des *unstructured.Unstructured, base []string, curName, desName string) (*part, error) {
	pt := &part{cur: cur.Object, des: des.Object, base: base}
	var err error
	if pt.curSpec, err = specAt(cur.Object, base, curName); err != nil {
		return nil, err
	}
	if pt.desSpec, err = specAt(des.Object, base, desName); err != nil {
		return nil, err
	}
	return pt, nil
}

func specAt(obj map[string]any, base []string, name string) (map[string]any, error) {
	m := obj
	for i, k := range base {
		v, ok := m[k]
		if !ok || v == nil {
			return map[string]any{}, nil
		}
		next, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s.%s is a %T, not an object", name, strings.Join(base[:i+1], "."), v)
		}
		m = next
	}
	return m, nil
}

func full(base []string, rel fieldPath) fieldPath {
	return append(slices.Clip(fieldPath(base)), rel...)
}

// ignoredMachineFields are the Machine spec fields CAPI leaves out of its in-place
// comparison (inplace.CleanupMachineSpecForDiff in v1.14).
func ignoredMachineFields() [][]string {
	return [][]string{
		{"clusterName"}, {"bootstrap"}, {"infrastructureRef"}, {"providerID"},
		{"minReadySeconds"}, {"readinessGates"}, {"taints"},
		{"deletion", "nodeDrainTimeoutSeconds"},
		{"deletion", "nodeVolumeDetachTimeoutSeconds"},
		{"deletion", "nodeDeletionTimeoutSeconds"},
	}
}

// planMachine decides the Machine (MachineSet template) spec and reports whether a
// version change is covered.
func (p *Planner) planMachine(s shape, m *part, res *Result) bool {
	versionCovered := false
	ignored := ignoredMachineFields()
diffs:
	for _, rel := range leafDiffs(m.curSpec, m.desSpec) {
		for _, ig := range ignored {
			if rel.hasPrefix(ig) {
				continue diffs
			}
		}
		f := full(m.base, rel)
		d := Decision{Object: s.machineKind, Field: f.String()}
		switch rel.String() {
		case "version":
			d.Covered, d.Reason = versionChange(m.curSpec["version"], m.desSpec["version"])
			versionCovered = d.Covered
		case "failureDomain":
			d.Reason = fmt.Sprintf("%s field %s changes: a running node cannot move to another failure domain", s.machineKind, f)
		default:
			d.Reason = fmt.Sprintf("%s field %s cannot be applied to a running node", s.machineKind, f)
		}
		if d.Covered {
			m.covered = append(m.covered, f)
		}
		res.Decisions = append(res.Decisions, d)
	}
	return versionCovered
}

// planBootstrap decides the KubeadmConfig(Template). It returns the part to patch,
// or nil when there is nothing to patch.
func (p *Planner) planBootstrap(s shape, cur, des *unstructured.Unstructured, versionCovered bool, res *Result) (*part, error) {
	switch {
	case cur == nil && des == nil:
		return nil, nil
	case cur == nil || des == nil:
		res.Decisions = append(res.Decisions, Decision{
			Object: s.bootstrapKind, Field: s.bootstrapSlot, Reason: "the bootstrap config is added or removed: a node cannot be re-bootstrapped in place",
		})
		return nil, nil
	}
	bp, err := newPart(cur, des, s.objectBase, "current."+s.bootstrapSlot, "desired."+s.bootstrapSlot)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	diffs := leafDiffs(bp.curSpec, bp.desSpec)
	kind := des.GetKind()
	supported := cur.GetKind() == s.bootstrapKind && des.GetKind() == s.bootstrapKind &&
		cur.GetAPIVersion() == kubeadmConfigGroupV1 && des.GetAPIVersion() == kubeadmConfigGroupV1
	if cur.GetKind() != des.GetKind() || cur.GetAPIVersion() != des.GetAPIVersion() {
		if len(diffs) > 0 || cur.GetKind() != des.GetKind() {
			res.Decisions = append(res.Decisions, Decision{Object: kind, Field: "kind",
				Reason: fmt.Sprintf("the bootstrap config changes from %s %s to %s %s: a node cannot be re-bootstrapped in place",
					cur.GetAPIVersion(), cur.GetKind(), des.GetAPIVersion(), des.GetKind())})
		}
		return nil, nil
	}
	for _, rel := range diffs {
		f := full(bp.base, rel)
		var d Decision
		switch {
		case supported && rel.String() == "joinConfiguration.skipPhases" && initPhasesReadAsJoin(bp.curSpec, bp.desSpec):
			d = Decision{Object: kind, Field: f.String(), Covered: true, Reason: reasonInitPhases}
		case supported && previousDefault(rel, bp.curSpec, bp.desSpec):
			d = Decision{Object: kind, Field: f.String(), Covered: true, Reason: reasonPreviousDefault}
		case supported:
			d = kubeadmDecision(p.kubeadm, kind, rel, f, versionCovered, p.policy.AcceptBootstrapOnlyFields())
			if gap := nodeApplyGap(rel, bp.curSpec, bp.desSpec); d.Covered && gap != "" {
				d.Covered, d.Reason = false, fmt.Sprintf("%s field %s: %s", kind, f, gap)
			}
		default:
			d = Decision{Object: kind, Field: f.String(), Reason: fmt.Sprintf(
				"%s field %s: bootstrap kind %s %s is not supported, only %s %s", kind, f, des.GetAPIVersion(), kind, kubeadmConfigGroupV1, s.bootstrapKind)}
		}
		if d.Covered {
			bp.covered = append(bp.covered, f)
		}
		res.Decisions = append(res.Decisions, d)
	}
	if supported && len(bp.covered) > 0 {
		res.Decisions = append(res.Decisions, unsafeUnchanged(kind, bp.base, bp.desSpec, diffs)...)
	}
	return bp, nil
}

// planInfrastructure decides the InfraMachine(Template) through the policy's table.
func (p *Planner) planInfrastructure(cur, des *unstructured.Unstructured, s shape, in *part, namespace, cluster string, res *Result) {
	kind := des.GetKind()
	diffs := leafDiffs(in.curSpec, in.desSpec)
	curGVK, desGVK := cur.GroupVersionKind(), des.GroupVersionKind()
	if curGVK != desGVK {
		res.Decisions = append(res.Decisions, Decision{Object: kind, Field: "kind", Reason: fmt.Sprintf(
			"the infrastructure object changes from %s to %s: a node cannot change infrastructure in place", curGVK, desGVK)})
		return
	}
	if len(diffs) == 0 {
		return
	}
	entry, _, known := p.policy.InfraKindFor(desGVK.Group, kind)
	if !known {
		for _, rel := range diffs {
			f := full(in.base, rel)
			res.Decisions = append(res.Decisions, Decision{Object: kind, Field: f.String(), Reason: fmt.Sprintf(
				"%s field %s: infrastructure kind %s (group %s) is not in the policy's infrastructure table", kind, f, kind, desGVK.Group)})
		}
		return
	}

	// The image fields change together: decide them as one.
	var imageDiffs, others []fieldPath
	for _, rel := range diffs {
		if slices.ContainsFunc(entry.ImagePaths, func(ip []string) bool { return rel.hasPrefix(ip) }) {
			imageDiffs = append(imageDiffs, rel)
		} else {
			others = append(others, rel)
		}
	}
	imageCovered, imageReason := p.imageVerdict(entry, in, kind, imageDiffs, namespace, cluster)
	for _, rel := range imageDiffs {
		f := full(in.base, rel)
		res.Decisions = append(res.Decisions, Decision{Object: kind, Field: f.String(), Covered: imageCovered, Reason: imageReason})
		if imageCovered {
			in.covered = append(in.covered, f)
		}
	}
	for _, rel := range others {
		f := full(in.base, rel)
		d := Decision{Object: kind, Field: f.String()}
		if slices.ContainsFunc(entry.IgnorePaths, func(ip []string) bool { return rel.hasPrefix(ip) }) {
			d.Covered, d.Reason = true, fmt.Sprintf("%s field %s does not affect a running node (policy ignorePaths)", kind, f)
			in.covered = append(in.covered, f)
		} else {
			d.Reason = fmt.Sprintf("%s field %s cannot be changed on a running node (only its OS image fields can)", kind, f)
		}
		res.Decisions = append(res.Decisions, d)
	}
}

// imageVerdict decides a change of a kind's image fields.
func (p *Planner) imageVerdict(entry policy.InfraKind, in *part, kind string, imageDiffs []fieldPath, namespace, cluster string) (bool, string) {
	if len(imageDiffs) == 0 {
		return false, ""
	}
	key := entry.ImagePaths[0]
	keyName := full(in.base, key).String()
	curVal, _ := lookup(in.curSpec, key)
	desVal, desOK := lookup(in.desSpec, key)
	keyChanged := slices.ContainsFunc(imageDiffs, func(d fieldPath) bool { return d.hasPrefix(key) || fieldPath(key).hasPrefix(d) })
	switch {
	case !keyChanged:
		return false, fmt.Sprintf("%s image fields change but the image itself (%s) does not: a different image under the same name cannot be verified", kind, keyName)
	case !desOK || desVal == nil:
		return false, fmt.Sprintf("%s %s is removed: there is no OS image to switch to", kind, keyName)
	}
	img, reason := p.policy.OSImageFor(entry.Kind, desVal, namespace, cluster)
	if img == nil {
		return false, fmt.Sprintf("%s %s changes: %s", kind, keyName, reason)
	}
	from, _ := policy.CanonicalImage(curVal)
	to, _ := policy.CanonicalImage(desVal)
	return true, fmt.Sprintf("%s %s changes from %s to %s: the node switches to OS artifact %s@%s with backend %s", kind, keyName, from, to, img.Ref, img.Digest, img.Backend)
}
