package gate

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestEtcdQuorumGate: a control-plane plan is marked good only when the whole
// etcd cluster is (after the local member's own health), and BeforeTouch holds a
// control-plane plan, never a worker's, on the same check.
func TestEtcdQuorumGate(t *testing.T) {
	cp := protocol.NewPlan("cp-1")
	cp.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	worker := protocol.NewPlan("cp-1")
	worker.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	// A control plane of an external etcd (kubeadm clusterConfiguration.etcd.external)
	// has no local member: its etcd checks would fail for good.
	external := protocol.NewPlan("cp-1")
	external.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode, ExternalEtcd: true}
	noMember := errors.New("no etcd member is configured for this node")
	down := errors.New("etcd member m2 is not healthy: no answer")
	tests := []struct {
		name           string
		plan           *protocol.NodePlan
		health, quorum error
		wantGate       string // "" passes Run
		wantBefore     error  // nil passes BeforeTouch
	}{
		{name: "control plane, cluster whole", plan: cp},
		{name: "control plane, a member down", plan: cp, quorum: down, wantGate: EtcdQuorum, wantBefore: down},
		{name: "local member down is its own gate first", plan: cp, health: errors.New("local unhealthy"), quorum: down, wantGate: EtcdHealth, wantBefore: down},
		{name: "external etcd: no local member, neither gate nor hold asks etcd", plan: external, health: noMember, quorum: noMember},
		{name: "worker never asks etcd", plan: worker, health: errors.New("no etcd"), quorum: errors.New("no etcd")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)},
				Etcd: etcd{err: tt.health, quorum: tt.quorum}, Timeout: 20 * time.Millisecond, Interval: 5 * time.Millisecond}
			err := c.Run(context.Background(), tt.plan)
			if tt.wantGate == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				var ge *Error
				g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
				g.Expect(ge.Gate).To(Equal(tt.wantGate))
			}
			before := c.BeforeTouch(context.Background(), tt.plan)
			if tt.wantBefore == nil {
				g.Expect(before).NotTo(HaveOccurred())
			} else {
				g.Expect(before).To(MatchError(tt.wantBefore))
			}
		})
	}
}

// TestEtcdChecksOutlastTheAttemptBound: an etcd check that takes longer than the
// Checker's attempt bound for API requests (a member that does not answer costs
// the client its own per-member timeout) still ends with the client's answer,
// which names the member, not with a bare deadline.
func TestEtcdChecksOutlastTheAttemptBound(t *testing.T) {
	g := NewWithT(t)
	cp := protocol.NewPlan("cp-1")
	cp.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	down := errors.New("etcd member m2 is not healthy: no answer")
	c := &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True"), pods: pods("v1.36.0", corev1.PodRunning)},
		Etcd:    etcd{quorum: down, delay: 50 * time.Millisecond},
		Timeout: 20 * time.Millisecond, Interval: 5 * time.Millisecond, AttemptTimeout: 10 * time.Millisecond}
	g.Expect(c.BeforeTouch(context.Background(), cp)).To(MatchError(down))
	var ge *Error
	g.Expect(errors.As(c.Run(context.Background(), cp), &ge)).To(BeTrue())
	g.Expect(ge.Gate).To(Equal(EtcdQuorum))
	g.Expect(ge).To(MatchError(down))
}

// TestBeforeTouchHoldTimeout: a plan held because the etcd cluster is not whole
// is given up after the hold timeout, counted from its first failed check; a
// check that passes starts the count afresh, and each plan has its own count.
func TestBeforeTouchHoldTimeout(t *testing.T) {
	g := NewWithT(t)
	cp := protocol.NewPlan("cp-1")
	cp.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	other := protocol.NewPlan("cp-1")
	other.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleControlPlane, Version: "v1.36.1", Action: protocol.KubeadmUpgradeNode}
	down := errors.New("etcd member m2 is not healthy: no answer")
	e := &etcd{quorum: down}
	now := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	c := &Checker{Etcd: e, Holds: &HoldClock{Timeout: 10 * time.Minute, Now: func() time.Time { return now }}}
	ctx := context.Background()
	var ht *HoldTimeoutError

	g.Expect(c.BeforeTouch(ctx, cp)).To(MatchError(down))
	now = now.Add(9 * time.Minute)
	err := c.BeforeTouch(ctx, cp)
	g.Expect(errors.As(err, &ht)).To(BeFalse(), "still within the hold timeout: %v", err)
	g.Expect(c.BeforeTouch(ctx, other)).To(MatchError(down), "another plan's count starts now")
	now = now.Add(time.Minute)
	err = c.BeforeTouch(ctx, cp)
	g.Expect(errors.As(err, &ht)).To(BeTrue(), "error %v", err)
	g.Expect(ht.Held).To(Equal(10 * time.Minute))
	g.Expect(err).To(MatchError(down))
	g.Expect(err.Error()).To(ContainSubstring("the etcd cluster was not whole within 10m0s"))
	g.Expect(errors.As(c.BeforeTouch(ctx, other), &ht)).To(BeFalse(), "the other plan was held 1 minute")

	// The cluster heals for one check: the count starts again.
	e.quorum = nil
	g.Expect(c.BeforeTouch(ctx, other)).To(Succeed())
	e.quorum = down
	now = now.Add(9 * time.Minute)
	g.Expect(errors.As(c.BeforeTouch(ctx, other), &ht)).To(BeFalse())

	// Without a HoldTimeout the default applies.
	d := &Checker{Etcd: e, Holds: &HoldClock{Now: func() time.Time { return now }}}
	g.Expect(d.BeforeTouch(ctx, cp)).To(MatchError(down))
	now = now.Add(DefaultHoldTimeout)
	g.Expect(errors.As(d.BeforeTouch(ctx, cp), &ht)).To(BeTrue())

	// Without a HoldClock a plan is held without a bound.
	u := &Checker{Etcd: e}
	g.Expect(u.BeforeTouch(ctx, cp)).To(MatchError(down))
	g.Expect(errors.As(u.BeforeTouch(ctx, cp), &ht)).To(BeFalse())
}

// memoryHold is a HoldRecord that outlives the HoldClocks using it, as the
// agent's file outlives the agent.
type memoryHold struct {
	plan  string
	since time.Time
}

func (m *memoryHold) LoadHold() (string, time.Time, bool, error) {
	return m.plan, m.since, m.plan != "", nil
}

func (m *memoryHold) SaveHold(plan string, since time.Time) error {
	m.plan, m.since = plan, since
	return nil
}

func (m *memoryHold) ClearHold() error {
	*m = memoryHold{}
	return nil
}

// TestHoldClockOutlivesTheProcess: with a Record, a new HoldClock (the agent
// restarted) goes on counting the hold its predecessor started; a start in the
// future (the clock was set back) counts from now; EndHold ends the count, so a
// retry of the same plan is held afresh.
func TestHoldClockOutlivesTheProcess(t *testing.T) {
	g := NewWithT(t)
	down := errors.New("etcd member m2 is not healthy: no answer")
	now := time.Date(2026, 12, 7, 7, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rec := &memoryHold{}
	var ht *HoldTimeoutError

	first := &HoldClock{Timeout: 10 * time.Minute, Now: clock, Record: rec}
	g.Expect(first.observe("p1", down)).To(MatchError(down))
	g.Expect(rec.plan).To(Equal("p1"))
	g.Expect(rec.since).To(Equal(now))
	now = now.Add(9 * time.Minute)

	restarted := &HoldClock{Timeout: 10 * time.Minute, Now: clock, Record: rec}
	g.Expect(errors.As(restarted.observe("p1", down), &ht)).To(BeFalse())
	now = now.Add(time.Minute)
	g.Expect(errors.As(restarted.observe("p1", down), &ht)).To(BeTrue(), "ten minutes since the first process's first check")

	restarted.EndHold("p1")
	g.Expect(rec.plan).To(BeEmpty(), "the record ends with the hold")
	err := restarted.observe("p1", down)
	g.Expect(errors.As(err, &ht)).To(BeFalse(), "a retry is held afresh: %v", err)

	// A recorded start later than the clock: counted from now, never cut short.
	rec.since = now.Add(time.Hour)
	behind := &HoldClock{Timeout: 10 * time.Minute, Now: clock, Record: rec}
	g.Expect(errors.As(behind.observe("p1", down), &ht)).To(BeFalse())
	now = now.Add(10 * time.Minute)
	g.Expect(errors.As(behind.observe("p1", down), &ht)).To(BeTrue())

	// A check that passes ends the hold and its record.
	g.Expect(behind.observe("p1", nil)).To(Succeed())
	g.Expect(rec.plan).To(BeEmpty())
}
