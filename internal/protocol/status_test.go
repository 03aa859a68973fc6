package protocol

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestStatusRoundTrip(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	in := NodeStatus{PlanHash: "abc", Phase: PhaseRolledBack, Step: 2, Steps: 7, Action: "kubeadm-upgrade", Message: "rolled back", StartedAt: now, UpdatedAt: now, EtcdData: EtcdDataKept}
	s, err := EncodeStatus(in)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := DecodeStatus(s)
	g.Expect(err).NotTo(HaveOccurred())
	in.V = StatusVersion
	g.Expect(out).To(Equal(in))
}

func TestDecodeStatusRefusesBadInput(t *testing.T) {
	tests := []struct {
		name  string
		value string
	}{
		{name: "garbage", value: "{"},
		{name: "wrong version", value: `{"v":2,"planHash":"a","phase":"Pending","step":0,"steps":1}`},
		{name: "unknown phase", value: `{"v":1,"planHash":"a","phase":"Dancing","step":0,"steps":1}`},
		{name: "no plan hash", value: `{"v":1,"phase":"Pending","step":0,"steps":1}`},
		{name: "step beyond steps", value: `{"v":1,"planHash":"a","phase":"Applying","step":5,"steps":4}`},
		{name: "unknown etcd outcome", value: `{"v":1,"planHash":"a","phase":"RolledBack","step":1,"steps":1,"etcdData":"Shredded"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := DecodeStatus(tt.value)
			g.Expect(err).To(MatchError(ErrInvalidStatus))
		})
	}
}

func TestPhaseTerminal(t *testing.T) {
	g := NewWithT(t)
	for _, p := range []Phase{PhaseCommitted, PhaseRolledBack, PhaseFailed} {
		g.Expect(p.Terminal()).To(BeTrue(), string(p))
	}
	for _, p := range []Phase{PhasePending, PhaseStaging, PhaseApplying, PhaseRebooting, PhaseVerifying, PhaseRollingBack} {
		g.Expect(p.Terminal()).To(BeFalse(), string(p))
	}
}
