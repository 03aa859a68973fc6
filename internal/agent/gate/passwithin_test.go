package gate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// userGatePlan is a worker plan whose built-in gates pass on readyNodes, with one
// user gate.
func userGatePlan(gate protocol.Gate) *protocol.NodePlan {
	p := protocol.NewPlan("cp-1")
	p.Kubernetes = protocol.KubernetesPlan{Role: protocol.RoleWorker, Version: "v1.36.0", Action: protocol.KubeadmUpgradeNode}
	p.Gates = []protocol.Gate{gate}
	return p
}

// realChecker runs user gates as real processes, with a global gate timeout far
// longer than any test here may take.
func realChecker() *Checker {
	return &Checker{Nodes: &fakeNodes{node: node("v1.36.0", "True")}, Runner: backend.ExecRunner{},
		Timeout: 5 * time.Minute, Interval: 50 * time.Millisecond, CommandTimeout: 30 * time.Second}
}

func TestUserGatePassWithin(t *testing.T) {
	healthy := filepath.Join(t.TempDir(), "healthy")
	lane := protocol.Gate{Name: "lane-health", Command: []string{"/bin/sh", "-c", `test -f "$0"`, healthy}, PassWithinSeconds: 1}

	t.Run("a failing gate fails at its own deadline, not the global timeout", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		err := realChecker().Run(context.Background(), userGatePlan(lane))
		took := time.Since(start)
		var ge *Error
		g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
		g.Expect(ge.Gate).To(Equal("lane-health"))
		g.Expect(ge.Timeout).To(Equal(time.Second))
		g.Expect(err.Error()).To(ContainSubstring("gate lane-health did not pass within 1s"))
		g.Expect(took).To(BeNumerically(">=", time.Second))
		g.Expect(took).To(BeNumerically("<", 3*time.Second))
	})

	t.Run("a hanging command without its own timeout is bounded by passWithin", func(t *testing.T) {
		g := NewWithT(t)
		hang := protocol.Gate{Name: "hang", Command: []string{"/bin/sleep", "60"}, PassWithinSeconds: 1}
		start := time.Now()
		err := realChecker().Run(context.Background(), userGatePlan(hang))
		g.Expect(err).To(MatchError(ContainSubstring("gate hang did not pass within 1s")))
		g.Expect(time.Since(start)).To(BeNumerically("<", 4*time.Second))
	})

	t.Run("a gate polls until it passes within its time", func(t *testing.T) {
		g := NewWithT(t)
		slow := lane
		slow.PassWithinSeconds = 20
		done := make(chan error, 1)
		go func() { done <- realChecker().Run(context.Background(), userGatePlan(slow)) }()
		g.Consistently(done, 400*time.Millisecond).ShouldNot(Receive(), "the host is not healthy yet")
		g.Expect(os.WriteFile(healthy, nil, 0o600)).To(Succeed())
		g.Eventually(done, 5*time.Second).Should(Receive(BeNil()))
	})

	t.Run("without passWithin the global timeout applies", func(t *testing.T) {
		g := NewWithT(t)
		c := realChecker()
		c.Timeout = 300 * time.Millisecond
		err := c.Run(context.Background(), userGatePlan(protocol.Gate{Name: "never", Command: []string{"/bin/false"}}))
		var ge *Error
		g.Expect(errors.As(err, &ge)).To(BeTrue(), "error %v", err)
		g.Expect(ge.Timeout).To(Equal(300 * time.Millisecond))
	})
}

// TestUserGateBounds: the agent runs a user gate with the bounds protocol.Gate.Bounds
// gives it from the Checker's gate and command timeouts, the rule the policy
// checks its verifying deadline by (protocol.GatesMax), and a gate may take up to
// their Max: a run started within passWithin that passes after it passes.
func TestUserGateBounds(t *testing.T) {
	c := realChecker()
	def := protocol.GateBounds{PassWithin: c.Timeout, Run: c.CommandTimeout}
	tests := []struct {
		name string
		gate protocol.Gate
	}{
		{"neither set", protocol.Gate{Name: "a", Command: []string{"/bin/true"}}},
		{"both set", protocol.Gate{Name: "b", Command: []string{"/bin/true"}, TimeoutSeconds: 10, PassWithinSeconds: 600}},
		{"passWithin shorter than the command timeout", protocol.Gate{Name: "c", HTTPGet: &protocol.HTTPGetGate{URL: "http://127.0.0.1:1/"}, PassWithinSeconds: 20}},
		{"timeout only", protocol.Gate{Name: "d", CEL: &protocol.CELGate{Expression: "true"}, TimeoutSeconds: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gates := c.Gates(userGatePlan(tt.gate))
			got := gates[len(gates)-1]
			want := tt.gate.Bounds(def)
			g.Expect(got.Name).To(Equal(tt.gate.Name))
			g.Expect(got.PassWithin).To(Equal(want.PassWithin))
			g.Expect(got.AttemptTimeout).To(Equal(want.Run))
		})
	}

	t.Run("a run that passes after passWithin is up still passes, within Max", func(t *testing.T) {
		g := NewWithT(t)
		slow := protocol.Gate{Name: "slow", Command: []string{"/bin/sleep", "2"}, TimeoutSeconds: 3, PassWithinSeconds: 1}
		start := time.Now()
		err := realChecker().Run(context.Background(), userGatePlan(slow))
		took := time.Since(start)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(took).To(BeNumerically(">", time.Duration(slow.PassWithinSeconds)*time.Second))
		g.Expect(took).To(BeNumerically("<", slow.Bounds(def).Max()))
	})
}
