package planner

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// versionChange decides a Kubernetes version change (kubeadm's rule): a newer patch
// release of the same minor, or exactly one minor up within the same major. It
// returns whether the change is covered and why.
func versionChange(from, to any) (bool, string) {
	fromStr, _ := from.(string)
	toStr, _ := to.(string)
	if fromStr == "" || toStr == "" {
		return false, fmt.Sprintf("version changes from %q to %q: both must be set", fromStr, toStr)
	}
	cur, err := parseVersion(fromStr)
	if err != nil {
		return false, fmt.Sprintf("current version %q is not a version like v1.36.0", fromStr)
	}
	des, err := parseVersion(toStr)
	if err != nil {
		return false, fmt.Sprintf("desired version %q is not a version like v1.36.0", toStr)
	}
	switch {
	case des.Major != cur.Major:
		return false, fmt.Sprintf("version %s to %s changes the major version", fromStr, toStr)
	case des.LT(cur):
		return false, fmt.Sprintf("version %s to %s is a downgrade: kubeadm cannot downgrade a node", fromStr, toStr)
	case des.EQ(cur):
		return false, fmt.Sprintf("version %s to %s differs only in build metadata", fromStr, toStr)
	case des.Minor == cur.Minor:
		return true, fmt.Sprintf("version %s to %s is a patch upgrade: kubeadm upgrades the node in place", fromStr, toStr)
	case des.Minor == cur.Minor+1:
		return true, fmt.Sprintf("version %s to %s is one minor up: kubeadm upgrades the node in place", fromStr, toStr)
	default:
		return false, fmt.Sprintf("version %s to %s skips a minor version: kubeadm upgrades one minor at a time", fromStr, toStr)
	}
}

// parseVersion parses a Kubernetes version, which always has a leading "v".
func parseVersion(s string) (semver.Version, error) {
	rest, ok := strings.CutPrefix(s, "v")
	if !ok {
		return semver.Version{}, fmt.Errorf("version %q has no leading v", s)
	}
	return semver.Parse(rest)
}
