package guard

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// Input is everything Decide needs about one write to one Cluster's objects.
type Input struct {
	// Object names the written object ("KubeadmControlPlane fleet/demo-cp") for the
	// refusal message.
	Object string
	// Live is the Cluster as stored; Proposed is the Cluster with the write applied
	// (preview.Apply, the same merge `capi-inplace plan -f` uses).
	Live, Proposed preview.Snapshot
	Planner        *planner.Planner
	Policy         *policy.Policy
	// Settings are the ExtensionConfig settings the hooks are called with.
	Settings map[string]string
	Now      time.Time
	// Before, when set, is preview.Build of Live (with the same planner, policy and
	// settings) from an earlier decision on the same stored objects; nil builds it.
	Before *preview.Report
	// Override is the AllowReplaceAnnotation value that this write sets or changes on
	// the object, or the Cluster's value for a write derived from the Cluster's
	// topology; "" when there is none.
	Override string
}

// Verdict is the guard's answer.
type Verdict struct {
	Allowed bool
	// Disabled is true when the Cluster turned the guard off.
	Disabled bool
	// Refusals are the Machines the write would make Cluster API replace, one per
	// new reason. When Allowed with Override set, these are the replacements the
	// override let through.
	Refusals []Refusal
	// Before, when set, is preview.Build of Live (with the same planner, policy and
	// settings) from an earlier decision on the same stored objects; nil builds it.
	Before *preview.Report
	// Override is the AllowReplaceAnnotation value that admitted Refusals.
	Override string
	// Warnings are for the writer (admission warnings, which kubectl prints): a
	// topology write judged by its version alone.
	Warnings []string
}

// Refusal is one reason one Machine would be replaced.
type Refusal struct {
	Machine string
	Kind    preview.CauseKind
	Message string
}

// Decide compares the plan of the Cluster as it is with the plan after the write, both
// by preview.Build (the code behind `capi-inplace plan`), and refuses the write when it
// adds a reason for Cluster API to replace a Machine. Reasons that exist already
// without the write (a Machine marked for deletion, an earlier change) are not this
// write's doing and do not refuse it. Errors are about objects the planner cannot read.
func Decide(in Input) (Verdict, error) {
	if disabled(in.Live) || disabled(in.Proposed) {
		return Verdict{Allowed: true, Disabled: true}, nil
	}
	build := func(proposed preview.Snapshot) (preview.Report, error) { return Plan(in, proposed) }
	before := in.Before
	if before == nil {
		b, err := build(in.Live)
		if err != nil {
			return Verdict{}, fmt.Errorf("plan the Cluster as it is: %w", err)
		}
		before = &b
	}
	after, err := build(in.Proposed)
	if err != nil {
		return Verdict{}, fmt.Errorf("plan the Cluster with the change: %w", err)
	}
	known := map[string][]string{}
	for _, m := range before.Machines {
		known[m.Name] = m.Reasons
	}
	var refusals []Refusal
	for _, m := range after.Machines {
		if m.Verdict != preview.VerdictReplace {
			continue
		}
		// A write that changes what the Machine's owner desires makes the replacement
		// its own even when the reasons read as before (the same field, another value).
		retargeted := ownerChanged(in.Live, in.Proposed, m.Owner)
		for _, c := range m.Causes {
			// A Machine marked for deletion or remediation is replaced whatever is
			// written: not this write's doing.
			if c.Kind != preview.CauseMachineAnnotation && (retargeted || !slices.Contains(known[m.Name], c.Message)) {
				refusals = append(refusals, Refusal{Machine: m.Name, Kind: c.Kind, Message: c.Message})
			}
		}
	}
	v := Verdict{Allowed: len(refusals) == 0, Refusals: refusals}
	v.Warnings = missingSecretWarnings(in, after)
	if !v.Allowed && in.Override != "" {
		v.Allowed, v.Override = true, in.Override
	}
	return v, nil
}

// missingSecretWarnings warn, for each owner the write changes, about the Secrets
// its desired KubeadmConfig references that do not exist yet: the guard cannot
// count them (one created right after the write is normal), CanUpdate and
// UpdateMachine count them when Cluster API updates the Machines.
func missingSecretWarnings(in Input, after preview.Report) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range after.Machines {
		if len(m.SecretsNotFound) == 0 || seen[m.Owner] || !ownerChanged(in.Live, in.Proposed, m.Owner) {
			continue
		}
		seen[m.Owner] = true
		out = append(out, fmt.Sprintf("capi-inplace guard: %s references Secret(s) %s, which do not exist yet: the guard did not count them against the %d-byte budget of referenced Secrets; "+
			"if they are over it when Cluster API updates the Machines, the CanUpdate hooks fail and the rollout waits until they fit",
			m.Owner, strings.Join(m.SecretsNotFound, ", "), secretbudget.MaxBytes))
	}
	return out
}

// ownerChanged reports whether the write changes the desired state of a Machine's
// owner ("KubeadmControlPlane/<name>" or "MachineDeployment/<name>", as
// preview.MachinePlan.Owner names it): its spec, or a template it references.
func ownerChanged(live, proposed preview.Snapshot, owner string) bool {
	kind, name, _ := strings.Cut(owner, "/")
	var refs []preview.ObjectKey
	switch kind {
	case "KubeadmControlPlane":
		if live.ControlPlane == nil || proposed.ControlPlane == nil {
			return live.ControlPlane != proposed.ControlPlane
		}
		if !reflect.DeepEqual(live.ControlPlane.Spec, proposed.ControlPlane.Spec) {
			return true
		}
		refs = append(refs, preview.RefKey(proposed.ControlPlane.Spec.MachineTemplate.Spec.InfrastructureRef))
	case "MachineDeployment":
		l, p := machineDeployment(live, name), machineDeployment(proposed, name)
		if l == nil || p == nil {
			return l != p
		}
		if !reflect.DeepEqual(l.Spec.Template, p.Spec.Template) {
			return true
		}
		refs = append(refs, preview.RefKey(p.Spec.Template.Spec.InfrastructureRef), preview.RefKey(p.Spec.Template.Spec.Bootstrap.ConfigRef))
	default:
		return false
	}
	for _, k := range refs {
		l, p := live.Objects[k], proposed.Objects[k]
		if (l == nil) != (p == nil) || (l != nil && !reflect.DeepEqual(l.Object["spec"], p.Object["spec"])) {
			return true
		}
	}
	return false
}

func machineDeployment(s preview.Snapshot, name string) *clusterv1.MachineDeployment {
	for i := range s.MachineDeployments {
		if s.MachineDeployments[i].Name == name {
			return &s.MachineDeployments[i]
		}
	}
	return nil
}

// Plan is preview.Build of the Cluster of in with proposed applied (in.Live for the
// Cluster as it is), with in's planner, policy, settings and clock.
func Plan(in Input, proposed preview.Snapshot) (preview.Report, error) {
	return preview.Build(preview.Input{
		Live: in.Live, Proposed: proposed, Planner: in.Planner, Policy: in.Policy,
		Settings: in.Settings, Now: in.Now,
	})
}

func disabled(s preview.Snapshot) bool {
	return s.Cluster != nil && s.Cluster.Annotations[inplacev1.GuardAnnotation] == inplacev1.GuardDisabled
}

// Machines returns the names of the Machines of the refusals, each once, in order.
func (v Verdict) Machines() []string {
	var out []string
	for _, r := range v.Refusals {
		if !slices.Contains(out, r.Machine) {
			out = append(out, r.Machine)
		}
	}
	return out
}

// Kinds returns the cause kinds of the refusals, each once, in order: the bounded
// label values of the refusal metric.
func (v Verdict) Kinds() []preview.CauseKind {
	var out []preview.CauseKind
	for _, r := range v.Refusals {
		if !slices.Contains(out, r.Kind) {
			out = append(out, r.Kind)
		}
	}
	return out
}

// Message is the refusal the writer sees (kubectl prints it): what would be replaced,
// each reason (naming the object and field), and the way out.
func (v Verdict) Message(object, cluster string) string {
	var b strings.Builder
	machines := v.Machines()
	fmt.Fprintf(&b, "capi-inplace guard: this change to %s would make Cluster API replace %d Machine(s) of Cluster %s instead of updating them in-place: ",
		object, len(machines), cluster)
	// Machines with the same reason share one entry: "Machines a, b: reason".
	var reasons []string
	byReason := map[string][]string{}
	for _, r := range v.Refusals {
		if _, ok := byReason[r.Message]; !ok {
			reasons = append(reasons, r.Message)
		}
		byReason[r.Message] = append(byReason[r.Message], r.Machine)
	}
	for i, reason := range reasons {
		if i > 0 {
			b.WriteString("; ")
		}
		names := byReason[reason]
		if len(names) == 1 {
			fmt.Fprintf(&b, "Machine %s: %s", names[0], reason)
		} else {
			fmt.Fprintf(&b, "Machines %s: %s", strings.Join(names, ", "), reason)
		}
	}
	fmt.Fprintf(&b, ". Preview with `capi-inplace plan %s -f <change>`; to allow this one replacement, set annotation %s=<reason> on the object in the same write; "+
		"to turn the guard off for the Cluster, annotate it %s=%s", cluster, inplacev1.AllowReplaceAnnotation, inplacev1.GuardAnnotation, inplacev1.GuardDisabled)
	return b.String()
}

// OverrideOf returns the AllowReplaceAnnotation value a write introduces
// (inplacev1.AllowReplaceOf).
func OverrideOf(oldAnnotations, newAnnotations map[string]string) string {
	return inplacev1.AllowReplaceOf(oldAnnotations, newAnnotations)
}
