package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// EtcdMinor is an etcd major.minor version: what decides whether etcd's data
// format can change (a patch release of etcd reads and writes the same format).
type EtcdMinor struct{ Major, Minor uint64 }

func (v EtcdMinor) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// less reports whether v is an older etcd minor than w.
func (v EtcdMinor) less(w EtcdMinor) bool {
	return v.Major < w.Major || v.Major == w.Major && v.Minor < w.Minor
}

// ParseEtcdMinor reads the etcd minor of an etcd image tag as kubeadm writes
// and reads it ("3.6.8-0", "v3.5.21"): major.minor.patch with an optional
// leading "v" and any suffix after the patch.
func ParseEtcdMinor(tag string) (EtcdMinor, error) {
	parts := strings.SplitN(strings.TrimPrefix(tag, "v"), ".", 3)
	if len(parts) != 3 {
		return EtcdMinor{}, fmt.Errorf("etcd version %.32q is not major.minor.patch", tag)
	}
	major, errMajor := strconv.ParseUint(parts[0], 10, 32)
	minor, errMinor := strconv.ParseUint(parts[1], 10, 32)
	patch := parts[2]
	if i := strings.IndexAny(patch, "-+_"); i >= 0 {
		patch = patch[:i]
	}
	_, errPatch := strconv.ParseUint(patch, 10, 32)
	if errMajor != nil || errMinor != nil || errPatch != nil {
		return EtcdMinor{}, fmt.Errorf("etcd version %.32q is not major.minor.patch", tag)
	}
	return EtcdMinor{Major: major, Minor: minor}, nil
}

// kubeadmEtcdRelease says which etcd minor kubeadm of some Kubernetes patch
// releases of one minor deploys by default for that Kubernetes version
// (kubeadm's constants.SupportedEtcdVersion[minor], when etcd.local.imageTag
// names none).
type kubeadmEtcdRelease struct {
	// minor is the Kubernetes 1.<minor> release line.
	minor uint64
	// fromPatch and throughPatch are the patch releases of the line the row
	// covers. throughPatch is at most the newest one whose kubeadm was checked: a
	// newer one may move etcd (SupportedEtcdVersion changes in patch releases
	// too) and is unknown. noLimit: the line is out of support, no patch
	// release comes.
	fromPatch, throughPatch uint64
	etcd                    EtcdMinor
}

const noLimit = ^uint64(0)

// kubeadmEtcdReleases is kubeadm's default etcd per Kubernetes release, at
// the granularity the restore rule needs (etcd's minor). Add a row, or move
// throughPatch, when a Kubernetes release is checked: the rows for lines still
// in support end at the newest patch release whose kubeadm source was read;
// TestKubeadmEtcdTableMatchesKubeadm compares the table with kubeadm's
// constants.go in the Go module cache whenever it holds k8s.io/kubernetes.
// A release beyond the table is unknown, and the rule restores.
var kubeadmEtcdReleases = []kubeadmEtcdRelease{
	// Kubernetes 1.22 to 1.33 (all out of support) ran etcd 3.5.
	{minor: 22, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 23, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 24, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 25, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 26, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 27, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 28, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 29, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 30, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 31, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 32, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	{minor: 33, throughPatch: noLimit, etcd: EtcdMinor{3, 5}},
	// etcd 3.6 from 1.34 on.
	{minor: 34, throughPatch: noLimit, etcd: EtcdMinor{3, 6}},
	// Checked: kubeadm v1.35.4 (3.6.6-0), v1.36.3 (3.6.8-0).
	{minor: 35, throughPatch: 4, etcd: EtcdMinor{3, 6}},
	{minor: 36, throughPatch: 3, etcd: EtcdMinor{3, 6}},
}

// KubeadmEtcdMinor is the etcd minor kubeadm of Kubernetes version deploys
// when the ClusterConfiguration names no etcd image tag; ok is false when the
// version does not parse or is not in capi-inplace's table (a release newer
// than the table, or older than 1.22).
func KubeadmEtcdMinor(version string) (EtcdMinor, bool) {
	return kubeadmEtcdMinor(kubeadmEtcdReleases, version)
}

func kubeadmEtcdMinor(table []kubeadmEtcdRelease, version string) (EtcdMinor, bool) {
	v, err := ParseVersion(version)
	if err != nil || v.Major != 1 {
		return EtcdMinor{}, false
	}
	for _, r := range table {
		if r.minor == v.Minor && r.fromPatch <= v.Patch && v.Patch <= r.throughPatch {
			return r.etcd, true
		}
	}
	return EtcdMinor{}, false
}
