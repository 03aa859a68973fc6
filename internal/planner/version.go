package planner

import (
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// versionChange decides a Kubernetes version change by kubeadm's rule
// (protocol.ClassifyVersionStep, the agent's rule too): a newer patch release of the
// same minor, or exactly one minor up within the same major. It returns whether the
// change is covered and why.
func versionChange(from, to any) (bool, string) {
	fromStr, _ := from.(string)
	toStr, _ := to.(string)
	if fromStr == "" || toStr == "" {
		return false, fmt.Sprintf("version changes from %q to %q: both must be set", fromStr, toStr)
	}
	cur, err := protocol.ParseVersion(fromStr)
	if err != nil {
		return false, fmt.Sprintf("current version %q is not a version like v1.36.0", fromStr)
	}
	des, err := protocol.ParseVersion(toStr)
	if err != nil {
		return false, fmt.Sprintf("desired version %q is not a version like v1.36.0", toStr)
	}
	switch protocol.ClassifyVersionStep(cur, des) {
	case protocol.StepMajor:
		return false, fmt.Sprintf("version %s to %s changes the major version", fromStr, toStr)
	case protocol.StepDowngrade:
		return false, fmt.Sprintf("version %s to %s is a downgrade: kubeadm cannot downgrade a node", fromStr, toStr)
	case protocol.StepSame:
		return false, fmt.Sprintf("version %s to %s differs only in build metadata", fromStr, toStr)
	case protocol.StepPatch:
		return true, fmt.Sprintf("version %s to %s is a patch upgrade: kubeadm upgrades the node in place", fromStr, toStr)
	case protocol.StepMinor:
		return true, fmt.Sprintf("version %s to %s is one minor up: kubeadm upgrades the node in place", fromStr, toStr)
	default:
		return false, fmt.Sprintf("version %s to %s skips a minor version: kubeadm upgrades one minor at a time", fromStr, toStr)
	}
}
