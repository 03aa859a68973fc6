package planner

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ErrUpgradePlan marks a GenerateUpgradePlan request that cannot be planned: a
// version that does not parse, a downgrade, a major change, workers newer than
// the control plane, or a minor with no version to step through.
var ErrUpgradePlan = errors.New("cannot plan the chained upgrade")

// UpgradePlanHandler is the extension's GenerateUpgradePlan handler name: a
// ClusterClass names it in spec.upgrade.external.generateUpgradePlanExtension as
// "generate-upgrade-plan.<ExtensionConfig name>".
const UpgradePlanHandler = "generate-upgrade-plan"

// maxCandidateVersions bounds the version list a plan is chosen from (the
// ClusterClass allows 100 kubernetesVersions; the policy adds its own).
const maxCandidateVersions = 1000

// UpgradePlanInput is one GenerateUpgradePlan request, as the planner needs it.
type UpgradePlanInput struct {
	// FromControlPlane is the control plane's current version; required.
	FromControlPlane string
	// FromWorkers is the lowest version of the workers; empty when the cluster has
	// no MachineDeployment or MachinePool with a version.
	FromWorkers string
	// To is the target version (Cluster spec.topology.version); required.
	To string
	// Versions are the versions the cluster may run: the ClusterClass's
	// spec.kubernetesVersions. Each intermediate minor steps to the newest of them
	// in that minor (what Cluster API does with kubernetesVersions alone); the
	// policy's kubernetesBinaries versions fill a minor the class does not list.
	Versions []string
	// StepWorkers makes the workers step at every minor with the control plane,
	// so each worker step is one minor, which kubeadm and the agent apply in
	// place. False leaves the workers' plan empty: Cluster API then computes its
	// own (jumps of up to three minors), as it does without this hook.
	StepWorkers bool
}

// UpgradePlan is the answer: the versions the control plane and the workers go
// through, in order, each ending with the target.
type UpgradePlan struct {
	ControlPlane []string
	Workers      []string
}

// UpgradePlan computes a chained upgrade plan that Cluster API accepts
// (desiredstate.DefaultAndValidateUpgradePlans, v1.14) and that keeps every step
// in place: the control plane takes every minor from its version to the target;
// with StepWorkers, the workers take every minor after theirs, each one a
// version of the control plane's plan (or the control plane's current version).
// When the policy names binaries for the target version, every step must have an
// entry too: a step without one would need the node's OS image to bring its
// kubeadm and kubelet, which the operator did not declare for the target.
//
// Without StepWorkers the answer is what Cluster API computes without the hook
// (from the ClusterClass's versions alone; one minor when it lists none), so a
// cluster that did not opt in keeps Cluster API's behaviour.
func (p *Planner) UpgradePlan(in UpgradePlanInput) (UpgradePlan, error) {
	if !in.StepWorkers {
		return chainedPlan(in)
	}
	policyVersions := p.policy.KubernetesVersions()
	in.Versions = append(slices.Clip(in.Versions), policyVersions...)
	plan, err := chainedPlan(in)
	if err != nil {
		return UpgradePlan{}, err
	}
	if slices.Contains(policyVersions, in.To) {
		var missing []string
		for _, v := range stepVersions(plan) {
			if !slices.Contains(policyVersions, v) {
				missing = append(missing, v)
			}
		}
		if len(missing) > 0 {
			return UpgradePlan{}, fmt.Errorf("%w: the policy lists kubernetesBinaries for %s but not for the intermediate step(s) %s: add them, or every node of the step would need its OS image to bring kubeadm and kubelet",
				ErrUpgradePlan, in.To, strings.Join(missing, ", "))
		}
	}
	return plan, nil
}

// ChainedUpgradeInput is the UpgradePlanInput of a GenerateUpgradePlan request:
// the versions Cluster API sends (the control plane's, the lowest of the workers',
// the target), the ClusterClass's kubernetesVersions, and whether the workers step at
// every minor: only for a Cluster whose namespace opted in and whose ExtensionConfig
// settings do not disable in-place updates. The hook and the guard's preview of the
// topology controller's writes build their input here, so they plan alike.
func ChainedUpgradeInput(fromControlPlane, fromWorkers, to string, classVersions []string, optedIn bool, settings map[string]string) UpgradePlanInput {
	return UpgradePlanInput{
		FromControlPlane: fromControlPlane, FromWorkers: fromWorkers, To: to,
		Versions: classVersions, StepWorkers: optedIn && !disabled(settings),
	}
}

// InPlaceDisabled reports whether an ExtensionConfig's settings turn in-place
// updates off (SettingDisableInPlaceUpdates): the CanUpdate hooks then cover
// nothing and GenerateUpgradePlan leaves the workers to Cluster API.
func InPlaceDisabled(settings map[string]string) bool { return disabled(settings) }

// stepVersions lists each version of the plan once, in order.
func stepVersions(plan UpgradePlan) []string {
	var out []string
	for _, v := range append(slices.Clone(plan.ControlPlane), plan.Workers...) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// chainedPlan is UpgradePlan without the policy: pure version arithmetic.
func chainedPlan(in UpgradePlanInput) (UpgradePlan, error) {
	if err := checkField("fromControlPlaneKubernetesVersion", in.FromControlPlane); err != nil {
		return UpgradePlan{}, err
	}
	if err := checkField("toKubernetesVersion", in.To); err != nil {
		return UpgradePlan{}, err
	}
	cp, _ := protocol.ParseVersion(in.FromControlPlane)
	to, _ := protocol.ParseVersion(in.To)
	if to.Major != cp.Major {
		return UpgradePlan{}, fmt.Errorf("%w: %s to %s changes the major version", ErrUpgradePlan, in.FromControlPlane, in.To)
	}
	if to.LT(cp) {
		return UpgradePlan{}, fmt.Errorf("%w: %s to %s is a downgrade of the control plane", ErrUpgradePlan, in.FromControlPlane, in.To)
	}
	hasWorkers := in.FromWorkers != ""
	workers, _ := protocol.ParseVersion(in.FromWorkers)
	if hasWorkers {
		if err := checkField("fromWorkersKubernetesVersion", in.FromWorkers); err != nil {
			return UpgradePlan{}, err
		}
		w := workers
		switch {
		case w.Major != to.Major:
			return UpgradePlan{}, fmt.Errorf("%w: workers at %s to %s changes the major version", ErrUpgradePlan, in.FromWorkers, in.To)
		case to.LT(w):
			return UpgradePlan{}, fmt.Errorf("%w: workers at %s to %s is a downgrade", ErrUpgradePlan, in.FromWorkers, in.To)
		case cp.LT(w):
			return UpgradePlan{}, fmt.Errorf("%w: workers at %s are newer than the control plane at %s, which the Kubernetes skew policy forbids", ErrUpgradePlan, in.FromWorkers, in.FromControlPlane)
		}
	}
	if len(in.Versions) > maxCandidateVersions {
		return UpgradePlan{}, fmt.Errorf("%w: %d candidate versions, at most %d", ErrUpgradePlan, len(in.Versions), maxCandidateVersions)
	}
	newest := map[uint64]string{} // minor -> newest listed version of that minor below the target
	for _, v := range in.Versions {
		sv, err := protocol.ParseVersion(v)
		if err != nil {
			return UpgradePlan{}, fmt.Errorf("%w: listed version %q: %w", ErrUpgradePlan, v, err)
		}
		if sv.Major != to.Major || sv.Minor <= cp.Minor || sv.Minor >= to.Minor || len(sv.Pre) > 0 {
			continue
		}
		if cur, ok := newest[sv.Minor]; !ok || less(cur, v) {
			newest[sv.Minor] = v
		}
	}

	var plan UpgradePlan
	if cp.String() != to.String() {
		for m := cp.Minor + 1; m < to.Minor; m++ {
			v, ok := newest[m]
			if !ok {
				return UpgradePlan{}, fmt.Errorf("%w: no version of minor %d.%d to step through from %s to %s: list one in the ClusterClass's spec.kubernetesVersions (or the policy's kubernetesBinaries)",
					ErrUpgradePlan, to.Major, m, in.FromControlPlane, in.To)
			}
			plan.ControlPlane = append(plan.ControlPlane, v)
		}
		plan.ControlPlane = append(plan.ControlPlane, in.To)
	}

	if !in.StepWorkers || !hasWorkers || workers.String() == to.String() {
		return plan, nil
	}
	// The workers may take only the control plane's versions: its current one and
	// those of its plan. One per minor after the workers' own.
	if workers.Minor+1 < cp.Minor {
		return UpgradePlan{}, fmt.Errorf("%w: workers at %s are more than one minor behind the control plane at %s: Cluster API lets workers step only through the control plane's versions, so they cannot take every minor in place; bring them to %d.%d first",
			ErrUpgradePlan, in.FromWorkers, in.FromControlPlane, cp.Major, cp.Minor)
	}
	for _, v := range append([]string{in.FromControlPlane}, plan.ControlPlane...) {
		sv, _ := protocol.ParseVersion(v)
		if sv.Minor <= workers.Minor && (sv.Minor != to.Minor || !workers.LT(sv)) {
			continue
		}
		if len(plan.Workers) > 0 && minorOf(plan.Workers[len(plan.Workers)-1]) == sv.Minor {
			plan.Workers[len(plan.Workers)-1] = v
			continue
		}
		plan.Workers = append(plan.Workers, v)
	}
	return plan, nil
}

func checkField(field, v string) error {
	if v == "" {
		return fmt.Errorf("%w: %s is empty", ErrUpgradePlan, field)
	}
	if _, err := protocol.ParseVersion(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUpgradePlan, field, err)
	}
	return nil
}

// less and minorOf read versions chainedPlan has already checked.
func less(a, b string) bool {
	va, _ := protocol.ParseVersion(a)
	vb, _ := protocol.ParseVersion(b)
	return va.LT(vb)
}

func minorOf(v string) uint64 {
	sv, _ := protocol.ParseVersion(v)
	return sv.Minor
}
