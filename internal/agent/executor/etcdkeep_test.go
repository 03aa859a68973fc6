package executor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestRollbackRestoresEtcdOnlyWhenItsDataChanged: on a single-member etcd, the
// rollback of a configuration-only change (same version, ClusterConfiguration
// without another etcd version) restores the files and keeps etcd's data, so no
// write to the cluster since the snapshot is lost, and says so; so does a patch
// upgrade whose kubeadm deploys etcd of the same minor. A minor upgrade's
// rollback restores the snapshot, as does a patch upgrade past the table of
// kubeadm's default etcd versions (a newer etcd minor cannot be ruled out) and
// a configuration change under the policy Always.
func TestRollbackRestoresEtcdOnlyWhenItsDataChanged(t *testing.T) {
	configOnly := func(policy protocol.EtcdRestore) *protocol.NodePlan {
		p := protocol.NewPlan("cp1")
		p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmNone, EtcdSnapshot: true, EtcdRestore: policy}
		p.ClusterConfiguration = json.RawMessage(`{"apiServer":{"extraArgs":[{"name":"v","value":"4"}]}}`)
		return p
	}
	// A patch upgrade whose kubeadm may deploy a newer etcd than the node runs
	// when its version is past the table of kubeadm's defaults.
	patchPlan := func(version string) *protocol.NodePlan {
		p := cpPlan()
		p.Kubernetes.Version = version
		return p
	}
	tests := []struct {
		name    string
		plan    *protocol.NodePlan
		from    string
		restore bool
		message string
	}{
		{name: "configuration only: files restored, etcd kept", plan: configOnly(""), from: "v1.36.0",
			message: "etcd kept its data (DataFormatUnchanged): no write to the cluster was lost"},
		{name: "configuration only under Always: etcd restored", plan: configOnly(protocol.EtcdRestoreAlways), from: "v1.36.0", restore: true},
		{name: "minor upgrade: etcd restored", plan: cpPlan(), from: "v1.35.2", restore: true},
		{name: "patch upgrade within kubeadm's etcd table: etcd kept", plan: patchPlan("v1.36.3"), from: "v1.36.0",
			message: "etcd kept its data (DataFormatUnchanged): no write to the cluster was lost"},
		{name: "patch upgrade past kubeadm's etcd table: etcd restored", plan: patchPlan("v1.36.4"), from: "v1.36.3", restore: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, failingGate)
			f.runner.On("kubeadm version", tt.plan.Kubernetes.Version+"\n", nil)
			f.kube.Etcd = &memberStub{members: 1, dbSize: 1 << 20}
			f.kube.FreeBytes = func(string) (uint64, error) { return 1 << 40, nil }
			st, err := f.x.StartFrom(context.Background(), tt.plan, tt.from)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.EtcdMembers).To(Equal(1))
			g.Expect(names(st.Rollback)).To(ContainElement(state.ActRestoreFiles))
			if !tt.restore {
				g.Expect(names(st.Rollback)).NotTo(ContainElement(state.ActRestoreEtcd))
				g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
				g.Expect(f.reports.last().Message).To(ContainSubstring(tt.message))
				g.Expect(f.reports.last().EtcdData).To(Equal(protocol.EtcdDataKept))
				g.Expect(f.reports.last().Gate).To(Equal(failingGate.Gate), "the failed gate, from the state")
				return
			}
			// The stub member refuses a restore: the rollback tried it.
			g.Expect(names(st.Rollback)).To(ContainElement(state.ActRestoreEtcd))
		})
	}
}

// TestPreflightFailureKeepsEtcd: a minor upgrade of a single control plane whose
// kubeadm preflight keeps failing changed nothing kubeadm manages, so its rollback
// must not restore etcd's snapshot (every write since would be lost for nothing);
// the status says etcd kept its data and why. A failure after the preflight still
// restores.
func TestPreflightFailureKeepsEtcd(t *testing.T) {
	tests := []struct {
		name    string
		fail    string
		restore bool
	}{
		{name: "preflight fails every attempt: etcd kept", fail: "kubeadm upgrade apply phase preflight"},
		{name: "the upgrade after the preflight fails: etcd restored", fail: "kubeadm upgrade apply v1.36.0", restore: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t, nil)
			f.runner.On(tt.fail, "", errors.New("exit status 1"))
			f.kube.PreflightRetryPause = time.Millisecond
			f.kube.Etcd = &memberStub{members: 1, dbSize: 1 << 20}
			f.kube.FreeBytes = func(string) (uint64, error) { return 1 << 40, nil }
			st, err := f.x.StartFrom(context.Background(), cpPlan(), "v1.35.2")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.FailedAction).To(Equal(state.ActKubeadmUpgrade))
			g.Expect(st.EtcdMembers).To(Equal(1))
			if tt.restore {
				// The stub member refuses a restore: the rollback tried it.
				g.Expect(names(st.Rollback)).To(ContainElement(state.ActRestoreEtcd))
				return
			}
			g.Expect(names(st.Rollback)).NotTo(ContainElement(state.ActRestoreEtcd))
			g.Expect(st.Phase).To(Equal(protocol.PhaseRolledBack))
			g.Expect(f.reports.last().Message).To(ContainSubstring("etcd kept its data (the update failed before it changed etcd): no write to the cluster was lost"))
			g.Expect(f.reports.last().EtcdData).To(Equal(protocol.EtcdDataKept))
		})
	}
}
