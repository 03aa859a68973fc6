package protocol

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestRestoreEtcdOnRollback: the rule for restoring a single-member etcd from
// its snapshot on rollback, per policy and change.
func TestRestoreEtcdOnRollback(t *testing.T) {
	tests := []struct {
		name    string
		policy  EtcdRestore
		change  EtcdChange
		restore bool
		reason  EtcdRestoreReason
	}{
		{name: "configuration only (same version): keep the data", change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0"},
			reason: EtcdDataUnchanged},
		{name: "patch upgrade within the table: keep the data", policy: EtcdRestoreIfDataChanged, change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.3"},
			reason: EtcdDataUnchanged},
		{name: "a kubelet build suffix is no minor change", change: EtcdChange{FromVersion: "v1.36.0+k3s1", ToVersion: "v1.36.1"},
			reason: EtcdDataUnchanged},
		{name: "minor upgrade: restore", change: EtcdChange{FromVersion: "v1.35.3", ToVersion: "v1.36.0"},
			restore: true, reason: EtcdMinorVersionChange},
		{name: "version before unknown: restore", change: EtcdChange{ToVersion: "v1.36.0"},
			restore: true, reason: EtcdVersionUnknown},

		// kubeadm's default etcd, when no tag pins it.
		{name: "patch upgrade to a release newer than the table: restore", change: EtcdChange{FromVersion: "v1.36.3", ToVersion: "v1.36.4"},
			restore: true, reason: EtcdDefaultUnknown},
		{name: "patch upgrade from a release newer than the table: restore", change: EtcdChange{FromVersion: "v1.36.4", ToVersion: "v1.36.5"},
			restore: true, reason: EtcdDefaultUnknown},
		{name: "configuration only on a release newer than the table: keep (the same kubeadm deploys the same etcd)",
			change: EtcdChange{FromVersion: "v1.36.9", ToVersion: "v1.36.9"}, reason: EtcdDataUnchanged},
		{name: "a pin removed: kubeadm's default is a newer minor: restore",
			change: EtcdChange{FromVersion: "v1.35.0", ToVersion: "v1.35.0", FromEtcdImageTag: "3.5.21-0"}, restore: true, reason: EtcdDefaultChange},
		{name: "a pin removed: kubeadm's default is the same minor: keep",
			change: EtcdChange{FromVersion: "v1.35.0", ToVersion: "v1.35.2", FromEtcdImageTag: "3.6.4-0"}, reason: EtcdDataUnchanged},

		// An image tag pins etcd.
		{name: "a tag of a newer etcd minor on a configuration-only update: restore",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", FromEtcdImageTag: "3.6.8-0", ToEtcdImageTag: "3.7.0-0"}, restore: true, reason: EtcdImageChange},
		{name: "a tag of a newer etcd minor over kubeadm's default: restore",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", ToEtcdImageTag: "v3.7.1"}, restore: true, reason: EtcdImageChange},
		{name: "a tag of another etcd patch release: keep (same data format)",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", FromEtcdImageTag: "3.6.6-0", ToEtcdImageTag: "3.6.8-0"}, reason: EtcdDataUnchanged},
		{name: "a tag of an older etcd minor: keep (kubeadm never moves etcd back)",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", ToEtcdImageTag: "3.5.24-0"}, reason: EtcdDataUnchanged},
		{name: "tags on both sides decide past the table",
			change: EtcdChange{FromVersion: "v1.36.7", ToVersion: "v1.36.8", FromEtcdImageTag: "3.6.8-0", ToEtcdImageTag: "3.6.9-0"}, reason: EtcdDataUnchanged},
		{name: "a tag that is not a version: restore",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.1", ToEtcdImageTag: "latest"}, restore: true, reason: EtcdImageChange},
		{name: "a tag where what the node runs is unknown: restore",
			change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", ToEtcdImageTag: "3.6.8-0", FromEtcdUnknown: true}, restore: true, reason: EtcdImageChange},

		{name: "Always restores a configuration-only change", policy: EtcdRestoreAlways, change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0"},
			restore: true, reason: EtcdPolicyAlways},
		{name: "Never keeps a minor upgrade's data", policy: EtcdRestoreNever, change: EtcdChange{FromVersion: "v1.35.0", ToVersion: "v1.36.0", ToEtcdImageTag: "3.7.0-0"},
			reason: EtcdPolicyNever},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			restore, reason := RestoreEtcdOnRollback(tt.policy, tt.change)
			g.Expect(restore).To(Equal(tt.restore))
			g.Expect(reason).To(Equal(tt.reason))
		})
	}
	g := NewWithT(t)
	g.Expect(EtcdRestore("Sometimes").Valid()).To(BeFalse())
	p := NewPlan("n1")
	p.Kubernetes = KubernetesPlan{Role: RoleControlPlane, Version: "v1.36.0", Action: KubeadmNone, EtcdRestore: "Sometimes"}
	g.Expect(p.Validate()).To(MatchError(ContainSubstring(`kubernetes.etcdRestore "Sometimes"`)))
}

// TestRestoreWhenKubeadmMovesEtcdInAPatchRelease: kubeadm's default etcd can
// move to a newer minor between two patch releases of one Kubernetes minor
// (its SupportedEtcdVersion changes in patch releases too). With a table that
// says so, the rollback of that patch upgrade restores, where judging from the
// image tag alone (no tag on either side) kept the data the newer etcd may have
// rewritten; a patch upgrade on either side of the move keeps it.
func TestRestoreWhenKubeadmMovesEtcdInAPatchRelease(t *testing.T) {
	table := []kubeadmEtcdRelease{
		{minor: 40, fromPatch: 0, throughPatch: 2, etcd: EtcdMinor{3, 6}},
		{minor: 40, fromPatch: 3, throughPatch: 5, etcd: EtcdMinor{3, 7}},
	}
	tests := []struct {
		name     string
		from, to string
		restore  bool
		reason   EtcdRestoreReason
	}{
		{name: "across the move: restore", from: "v1.40.1", to: "v1.40.3", restore: true, reason: EtcdDefaultChange},
		{name: "before the move: keep", from: "v1.40.0", to: "v1.40.2", reason: EtcdDataUnchanged},
		{name: "after the move: keep", from: "v1.40.3", to: "v1.40.5", reason: EtcdDataUnchanged},
		{name: "past the table: restore", from: "v1.40.5", to: "v1.40.6", restore: true, reason: EtcdDefaultUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			restore, reason := restoreEtcdOnRollback(table, EtcdRestoreIfDataChanged, EtcdChange{FromVersion: tt.from, ToVersion: tt.to})
			g.Expect(restore).To(Equal(tt.restore))
			g.Expect(reason).To(Equal(tt.reason))
		})
	}
}

// TestKubeadmEtcdMinor: the table's lookups, and what it does not know.
func TestKubeadmEtcdMinor(t *testing.T) {
	tests := []struct {
		version string
		want    EtcdMinor
		ok      bool
	}{
		{version: "v1.33.9", want: EtcdMinor{3, 5}, ok: true},
		{version: "v1.34.0", want: EtcdMinor{3, 6}, ok: true},
		{version: "v1.35.4", want: EtcdMinor{3, 6}, ok: true},
		{version: "v1.36.0-rc.1", want: EtcdMinor{3, 6}, ok: true},
		{version: "v1.36.3+k3s1", want: EtcdMinor{3, 6}, ok: true},
		{version: "v1.36.4"},
		{version: "v1.37.0"},
		{version: "v1.21.0"},
		{version: "v2.0.0"},
		{version: "1.36.0"},
	}
	for _, tt := range tests {
		got, ok := KubeadmEtcdMinor(tt.version)
		if ok != tt.ok || got != tt.want {
			t.Errorf("KubeadmEtcdMinor(%q) = %v, %v; want %v, %v", tt.version, got, ok, tt.want, tt.ok)
		}
	}
	for _, tag := range []string{"3.6.8", "3.6.8-0", "v3.6.8", "3.6.8_custom", "3.6.8+build"} {
		if m, err := ParseEtcdMinor(tag); err != nil || m != (EtcdMinor{3, 6}) {
			t.Errorf("ParseEtcdMinor(%q) = %v, %v", tag, m, err)
		}
	}
	for _, tag := range []string{"latest", "3.6", "3.x.1", "sha256:abc", ""} {
		if _, err := ParseEtcdMinor(tag); err == nil {
			t.Errorf("ParseEtcdMinor(%q) parsed", tag)
		}
	}
}
