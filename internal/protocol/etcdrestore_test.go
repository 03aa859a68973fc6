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
		{name: "patch upgrade: keep the data", policy: EtcdRestoreIfDataChanged, change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.4"},
			reason: EtcdDataUnchanged},
		{name: "a kubelet build suffix is no minor change", change: EtcdChange{FromVersion: "v1.36.0+k3s1", ToVersion: "v1.36.1"},
			reason: EtcdDataUnchanged},
		{name: "minor upgrade: restore", change: EtcdChange{FromVersion: "v1.35.3", ToVersion: "v1.36.0"},
			restore: true, reason: EtcdMinorVersionChange},
		{name: "etcd image change on a configuration-only update: restore", change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0", EtcdImageChanged: true},
			restore: true, reason: EtcdImageChange},
		{name: "version before unknown: restore", change: EtcdChange{ToVersion: "v1.36.0"},
			restore: true, reason: EtcdVersionUnknown},
		{name: "Always restores a configuration-only change", policy: EtcdRestoreAlways, change: EtcdChange{FromVersion: "v1.36.0", ToVersion: "v1.36.0"},
			restore: true, reason: EtcdPolicyAlways},
		{name: "Never keeps a minor upgrade's data", policy: EtcdRestoreNever, change: EtcdChange{FromVersion: "v1.35.0", ToVersion: "v1.36.0", EtcdImageChanged: true},
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
