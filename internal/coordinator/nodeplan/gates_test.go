package nodeplan

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

func TestBuildCarriesGates(t *testing.T) {
	g := NewWithT(t)
	gates := []protocol.Gate{{Name: "lane-health", Command: []string{"/bin/sh", "-c", "test -f /etc/realnode/healthy"}, PassWithinSeconds: 20}}
	in := Input{Machine: machine("v1.36.0", true), NodeName: "cp-1", Gates: gates, Node: NodeFacts{KubeletVersion: "v1.35.4"}}
	p, err := Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Gates).To(Equal(gates))

	// The gates are desired content: the plan's identity changes with them.
	h1, _ := p.Hash()
	in.Gates = nil
	plain, err := Build(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plain.Gates).To(BeNil())
	h2, _ := plain.Hash()
	g.Expect(h1).NotTo(Equal(h2))

	// Gates that do not validate never reach a plan.
	in.Gates = []protocol.Gate{{Name: "x", Command: []string{"curl"}}}
	_, err = Build(in)
	g.Expect(err).To(MatchError(protocol.ErrInvalidPlan))
	g.Expect(err).To(MatchError(ContainSubstring(`gates: [0].command[0] "curl" is not a clean absolute path`)))
}
