package preview

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// templateSpecPath is where a KubeadmConfigTemplate holds its KubeadmConfigSpec.
var templateSpecPath = []string{"spec", "template", "spec"}

// budgetSpecs are the desired KubeadmConfigSpecs whose referenced Secrets the
// CanUpdate hooks count (secretbudget): the KubeadmControlPlane's
// kubeadmConfigSpec (KCP copies its files and users into each desired
// KubeadmConfig) and each MachineDeployment's KubeadmConfigTemplate's.
func budgetSpecs(s Snapshot) ([]*bootstrapv1.KubeadmConfigSpec, error) {
	var out []*bootstrapv1.KubeadmConfigSpec
	if s.ControlPlane != nil {
		out = append(out, &s.ControlPlane.Spec.KubeadmConfigSpec)
	}
	for i := range s.MachineDeployments {
		spec, err := templateSpec(s.Objects[RefKey(s.MachineDeployments[i].Spec.Template.Spec.Bootstrap.ConfigRef)])
		if err != nil {
			return nil, err
		}
		if spec != nil {
			out = append(out, spec)
		}
	}
	return out, nil
}

// templateSpec is the files and users part of a KubeadmConfigTemplate's spec; nil
// for nil or another kind of bootstrap template.
func templateSpec(u *unstructured.Unstructured) (*bootstrapv1.KubeadmConfigSpec, error) {
	if u == nil || u.GroupVersionKind().Group != bootstrapv1.GroupVersion.Group || u.GetKind() != "KubeadmConfigTemplate" {
		return nil, nil
	}
	return secretbudget.SpecAt(u, templateSpecPath...)
}

// secretBudget checks the Secrets a Machine's desired KubeadmConfig references
// against the budget, with the sizes the proposed Snapshot holds: over it, the
// CanUpdate hooks answer "cannot update in place" and Cluster API replaces the
// Machine (a Cause); missing are the referenced Secrets that do not exist, which
// are not counted now (CanUpdate and UpdateMachine count them when Cluster API
// updates the Machine). Nothing is counted when the sizes were not read.
func secretBudget(in Input, c comparison) (*Cause, []string, error) {
	if in.Proposed.SecretSizes == nil || c.desiredSpec == nil {
		return nil, nil, nil
	}
	over, missing, err := in.Proposed.SecretSizes.Check(c.desiredSpec)
	if err != nil || over == nil {
		return nil, missing, err
	}
	return &Cause{Kind: CauseSecretBudget, Message: fmt.Sprintf(
		"%s files and users: %s (the CanUpdate hooks fail on such a configuration: the rollout waits until the Secrets fit)", c.desiredSpecOf, over)}, missing, nil
}

// missingSecretsNote is the plan's note for referenced Secrets that do not exist.
func missingSecretsNote(owner string, names []string) string {
	return fmt.Sprintf("%s references Secret(s) %s, which do not exist: they are not counted against the %d-byte budget of referenced Secrets now; "+
		"CanUpdate and UpdateMachine count them when Cluster API updates the Machines (over the budget, CanUpdate fails and the rollout waits until they fit)",
		owner, strings.Join(names, ", "), secretbudget.MaxBytes)
}
