package protocol

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestValidateGates(t *testing.T) {
	ok := Gate{Name: "lane-health", Command: []string{"/bin/sh", "-c", "test -f /etc/realnode/healthy"}, TimeoutSeconds: 5, PassWithinSeconds: 20}
	with := func(mutate func(g *Gate)) []Gate {
		g := ok
		g.Command = append([]string(nil), ok.Command...)
		mutate(&g)
		return []Gate{g}
	}
	many := make([]Gate, MaxGates+1)
	for i := range many {
		many[i] = Gate{Name: "g" + strings.Repeat("x", i), Command: []string{"/bin/true"}}
	}
	tests := []struct {
		name    string
		gates   []Gate
		wantErr string
	}{
		{"none", nil, ""},
		{"valid", []Gate{ok, {Name: "app-0", Command: []string{"/usr/bin/curl", "-fsS", "http://127.0.0.1:8080/healthz"}}}, ""},
		{"bounds are inclusive", with(func(g *Gate) { g.TimeoutSeconds, g.PassWithinSeconds = MaxGateSeconds, MaxGateSeconds }), ""},
		{"empty name", with(func(g *Gate) { g.Name = "" }), `[0].name "" is not a DNS label`},
		{"upper-case name", with(func(g *Gate) { g.Name = "Lane" }), "is not a DNS label"},
		{"name too long", with(func(g *Gate) { g.Name = strings.Repeat("a", 64) }), "is not a DNS label"},
		{"name twice", []Gate{ok, ok}, `[1].name "lane-health" is listed twice`},
		{"no command", with(func(g *Gate) { g.Command = nil }), "[0].command is empty"},
		{"relative argv[0]", with(func(g *Gate) { g.Command[0] = "sh" }), `[0].command[0] "sh" is not a clean absolute path`},
		{"unclean argv[0]", with(func(g *Gate) { g.Command[0] = "/bin/../bin/sh" }), "is not a clean absolute path"},
		{"too many arguments", with(func(g *Gate) { g.Command = append([]string{"/bin/echo"}, make([]string, MaxGateArgs)...) }), "arguments, more than 64"},
		{"argument too long", with(func(g *Gate) { g.Command[2] = strings.Repeat("x", MaxGateArgBytes+1) }), "[0].command[2] is 4097 bytes"},
		{"NUL in an argument", with(func(g *Gate) { g.Command[2] = "a\x00b" }), "[0].command[2] contains a NUL byte"},
		{"negative timeout", with(func(g *Gate) { g.TimeoutSeconds = -1 }), "[0].timeoutSeconds -1 is not between 0 and 3600"},
		{"timeout too long", with(func(g *Gate) { g.TimeoutSeconds = MaxGateSeconds + 1 }), "timeoutSeconds 3601"},
		{"negative passWithin", with(func(g *Gate) { g.PassWithinSeconds = -5 }), "[0].passWithinSeconds -5 is not between 0 and 3600"},
		{"passWithin too long", with(func(g *Gate) { g.PassWithinSeconds = MaxGateSeconds + 1 }), "passWithinSeconds 3601"},
		{"too many gates", many, "33 gates, more than 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := ValidateGates(tt.gates)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			// The plan refuses the same gates.
			p := validPlan()
			p.Gates = tt.gates
			g.Expect(p.Validate()).To(MatchError(ErrInvalidPlan))
			g.Expect(p.Validate()).To(MatchError(ContainSubstring("gates: ")))
			g.Expect(p.Validate()).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}

func TestGatesRoundTripAndHash(t *testing.T) {
	g := NewWithT(t)
	p := validPlan()
	p.Gates = []Gate{{Name: "lane-health", Command: []string{"/bin/sh", "-c", "test -f /etc/realnode/healthy"}, TimeoutSeconds: 5, PassWithinSeconds: 20}}
	data, err := EncodePlan(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring(`"gates":[{"name":"lane-health","command":["/bin/sh","-c","test -f /etc/realnode/healthy"],"timeoutSeconds":5,"passWithinSeconds":20}]`))
	got, err := DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(p))

	// PassWithinSeconds is part of the plan's identity: a changed deadline is a new plan.
	before, err := p.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	p.Gates[0].PassWithinSeconds = 21
	after, err := p.Hash()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(after).NotTo(Equal(before))

	// A plan without gates encodes as before the field existed: its hash does not change.
	plain, err := EncodePlan(validPlan())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(plain)).NotTo(ContainSubstring("gates"))
	g.Expect(string(plain)).NotTo(ContainSubstring("passWithinSeconds"))

	// A plan from a coordinator that sends a bad deadline is refused whole.
	bad := strings.Replace(string(data), `"passWithinSeconds":20`, `"passWithinSeconds":-1`, 1)
	_, err = DecodePlan([]byte(bad))
	g.Expect(err).To(MatchError(ContainSubstring("gates: [0].passWithinSeconds -1")))
}
