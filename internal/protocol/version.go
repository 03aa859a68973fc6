package protocol

import (
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// ParseVersion parses a Kubernetes version the way Machines, plans and kubelets
// write it: a leading "v" and a semantic version ("v1.36.0", "v1.36.0-rc.1",
// "v1.36.0+k3s1"). It is the one version parser of the planner, the coordinator and
// the agent, so that "covered", "done" and "passed" can never disagree.
func ParseVersion(s string) (semver.Version, error) {
	rest, ok := strings.CutPrefix(s, "v")
	if !ok {
		return semver.Version{}, fmt.Errorf("version %q has no leading v", s)
	}
	v, err := semver.Parse(rest)
	if err != nil {
		return semver.Version{}, fmt.Errorf("version %q: %w", s, err)
	}
	return v, nil
}

// ValidVersion reports whether v is a Kubernetes version as plans carry it
// ("v1.36.0", optionally with a pre-release or build suffix): what ParseVersion accepts.
func ValidVersion(v string) bool {
	_, err := ParseVersion(v)
	return err == nil
}

// SameRelease reports whether a and b are the same Kubernetes release, ignoring
// build metadata: a kubelet reports what it was built as ("v1.36.0+k3s1"), a
// Machine what was asked ("v1.36.0"). It is false when either is not a version.
func SameRelease(a, b string) bool {
	va, err := ParseVersion(a)
	if err != nil {
		return false
	}
	vb, err := ParseVersion(b)
	if err != nil {
		return false
	}
	return sameRelease(va, vb)
}

func sameRelease(a, b semver.Version) bool {
	a.Build, b.Build = nil, nil
	return a.EQ(b)
}

// VersionStep is how kubeadm sees a change of a node's Kubernetes version.
type VersionStep int

const (
	// StepSame is the same release (build metadata may differ).
	StepSame VersionStep = iota
	// StepPatch is a newer release of the same minor version.
	StepPatch
	// StepMinor is exactly one minor version up within the same major version.
	StepMinor
	// StepDowngrade is an older release: kubeadm cannot downgrade a node.
	StepDowngrade
	// StepMajor changes the major version.
	StepMajor
	// StepSkipsMinor is more than one minor version up: kubeadm upgrades one minor
	// at a time.
	StepSkipsMinor
)

// Upgrade reports whether kubeadm can upgrade a node by this step.
func (s VersionStep) Upgrade() bool { return s == StepPatch || s == StepMinor }

// ClassifyVersionStep classifies the change from one Kubernetes version to another
// by kubeadm's rule: a newer patch release, or exactly one minor up in the same
// major, can be upgraded in place; nothing else can.
func ClassifyVersionStep(from, to semver.Version) VersionStep {
	switch {
	case sameRelease(from, to):
		return StepSame
	case to.Major != from.Major:
		return StepMajor
	case to.LT(from):
		return StepDowngrade
	case to.Minor == from.Minor:
		return StepPatch
	case to.Minor == from.Minor+1:
		return StepMinor
	default:
		return StepSkipsMinor
	}
}
