package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// The rule of which recorded failures count against a pool's failure budget
// (docs/fleet-controls.md, "the budget resets when the spec changes"), shared by
// the coordinator's gate and `capi-inplace status`: a failure is recorded with
// its Machine's owner (OwnerOf) and the key of the owner's spec then
// (OwnerSpecKey); it counts while the owner exists with that same key (Counted).
// Callers read the owners; everything here is pure.

// KindMachineDeployment is the owner kind of a worker Machine.
const KindMachineDeployment = "MachineDeployment"

// OwnerOf names the owner whose spec a Machine follows, "Kind/name": its
// MachineDeployment (mdLabel, the Machine's cluster.x-k8s.io/deployment-name
// label), else, for a control-plane Machine (cpLabel, its
// cluster.x-k8s.io/control-plane-name label), the Cluster's control plane
// (cpKind/cpName, the Cluster's spec.controlPlaneRef). "": neither; such a
// Machine's failures count until resume.
func OwnerOf(mdLabel, cpLabel, cpKind, cpName string) string {
	switch {
	case mdLabel != "":
		return KindMachineDeployment + "/" + mdLabel
	case cpLabel != "" && cpKind != "" && cpName != "":
		return cpKind + "/" + cpName
	}
	return ""
}

// SplitOwner splits an owner "Kind/name" into its kind and name.
func SplitOwner(owner string) (kind, name string) {
	kind, name, _ = strings.Cut(owner, "/")
	return kind, name
}

// OwnerSpecKey keys the desired spec of an owner of kind, given the object's
// "spec" as decoded JSON (unstructured): a MachineDeployment's spec.template, a
// control plane's spec without replicas and rollout settings (scaling or a
// rollout knob is not a new spec).
func OwnerSpecKey(kind string, spec map[string]any) (string, error) {
	var keyed any
	if kind == KindMachineDeployment {
		keyed = spec["template"]
	} else {
		trimmed := map[string]any{}
		for k, v := range spec {
			switch k {
			case "replicas", "rollout", "remediation", "machineNaming":
			default:
				trimmed[k] = v
			}
		}
		keyed = trimmed
	}
	b, err := json.Marshal(keyed)
	if err != nil {
		return "", fmt.Errorf("key the spec of a %s: %w", kind, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// Owners lists, once each and in order, the owners the failures name: the
// objects a caller reads to build the SpecLookup of Counted. Failures without an
// owner need no look-up.
func Owners(failures []Failure) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range failures {
		if f.Owner != "" && !seen[f.Owner] {
			seen[f.Owner] = true
			out = append(out, f.Owner)
		}
	}
	return out
}
