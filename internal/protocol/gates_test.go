package protocol

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
		{"no kind", with(func(g *Gate) { g.Command = nil }), "[0] has none of command, httpGet and cel: give exactly one"},
		{"command and httpGet", with(func(g *Gate) { g.HTTPGet = &HTTPGetGate{URL: "http://127.0.0.1/healthz"} }), "[0] has more than one of command, httpGet and cel"},
		{"httpGet and cel", []Gate{{Name: "x", HTTPGet: &HTTPGetGate{URL: "http://127.0.0.1/"}, CEL: &CELGate{Expression: "true"}}}, "[0] has more than one of"},
		{"http probe", []Gate{http(func(h *HTTPGetGate) {})}, ""},
		{"https probe with a CA bundle and a status range", []Gate{http(func(h *HTTPGetGate) {
			h.URL, h.CABundle, h.ExpectedStatusMin, h.ExpectedStatusMax = "https://10.0.0.1:8443/readyz?verbose", testCA, 200, 204
		})}, ""},
		{"https probe skipping verification", []Gate{http(func(h *HTTPGetGate) { h.URL, h.InsecureSkipVerify = "https://localhost:8443/", true })}, ""},
		{"file URL", []Gate{http(func(h *HTTPGetGate) { h.URL = "file:///etc/passwd" })}, `[0].httpGet.url scheme "file" is not http or https`},
		{"no scheme", []Gate{http(func(h *HTTPGetGate) { h.URL = "localhost/healthz" })}, "is not http or https"},
		{"no host", []Gate{http(func(h *HTTPGetGate) { h.URL = "http:///healthz" })}, `[0].httpGet.url "http:///healthz" has no host`},
		{"user info", []Gate{http(func(h *HTTPGetGate) { h.URL = "https://admin:hunter2@localhost/" })}, "[0].httpGet.url carries user info"},
		{"URL does not parse", []Gate{http(func(h *HTTPGetGate) { h.URL = "http://[::1/" })}, "[0].httpGet.url does not parse"},
		{"URL too long", []Gate{http(func(h *HTTPGetGate) { h.URL = "http://localhost/" + strings.Repeat("a", MaxGateURLBytes) })}, "[0].httpGet.url is 2065 bytes, more than 2048"},
		{"status below 100", []Gate{http(func(h *HTTPGetGate) { h.ExpectedStatusMin = 99 })}, "[0].httpGet.expectedStatusMin 99 is not between 100 and 599"},
		{"status above 599", []Gate{http(func(h *HTTPGetGate) { h.ExpectedStatusMax = 600 })}, "[0].httpGet.expectedStatusMax 600 is not between 100 and 599"},
		{"negative status", []Gate{http(func(h *HTTPGetGate) { h.ExpectedStatusMax = -200 })}, "expectedStatusMax -200 is not between"},
		{"empty status range", []Gate{http(func(h *HTTPGetGate) { h.ExpectedStatusMin = 500 })}, "[0].httpGet.expected status range 500-399 is empty"},
		{"CA bundle without a certificate", []Gate{http(func(h *HTTPGetGate) { h.URL, h.CABundle = "https://localhost/", "not a certificate" })}, "[0].httpGet.caBundle holds no PEM certificate"},
		{"CA bundle too big", []Gate{http(func(h *HTTPGetGate) { h.URL, h.CABundle = "https://localhost/", strings.Repeat(testCA, 30) })}, "more than 16384"},
		{"CA bundle for http", []Gate{http(func(h *HTTPGetGate) { h.CABundle = testCA })}, "[0].httpGet.caBundle is set for a http URL"},
		{"insecureSkipVerify for http", []Gate{http(func(h *HTTPGetGate) { h.InsecureSkipVerify = true })}, "[0].httpGet.insecureSkipVerify is set for a http URL"},
		{"cel", []Gate{{Name: "pods-ready", CEL: &CELGate{Expression: `pods.all(p, p.status.phase == "Running")`}}}, ""},
		{"empty cel", []Gate{{Name: "pods-ready", CEL: &CELGate{Expression: "  "}}}, "[0].cel.expression is empty"},
		{"cel too long", []Gate{{Name: "pods-ready", CEL: &CELGate{Expression: strings.Repeat("true && ", 600) + "true"}}}, "[0].cel.expression is 4804 bytes, more than 4096"},
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

// http is a valid httpGet gate, changed by mutate.
func http(mutate func(h *HTTPGetGate)) Gate {
	h := HTTPGetGate{URL: "http://127.0.0.1:8080/healthz"}
	mutate(&h)
	return Gate{Name: "probe", HTTPGet: &h, TimeoutSeconds: 2, PassWithinSeconds: 30}
}

// testCA is a self-signed certificate (PEM) for the CA bundle rows.
const testCA = `-----BEGIN CERTIFICATE-----
MIIBeTCCAR+gAwIBAgIULzrbujEe7ekuWGEyfb1F1sD3Y3UwCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdC1jYTAeFw0yNjEyMDEyMTM0MzFaFw0zNjExMjgyMTM0
MzFaMBIxEDAOBgNVBAMMB3Rlc3QtY2EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AASFjIiXsC4UuAmOaZztNttpQ1feABgsm1LcTP+PlvVx0+GXlnN9fsLfi1lGpIEN
6R2F/BuZ3mwKRgEnD7E1S+lwo1MwUTAdBgNVHQ4EFgQUecLo4zMN7AvdRc5Ldo/7
hxwiqWowHwYDVR0jBBgwFoAUecLo4zMN7AvdRc5Ldo/7hxwiqWowDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiEA8yJgFIwWGE3BgXRNlWmSQm5i2qoA
BxRLv5Zvk3FRswwCIAHRAJvzIS5NMJXlUdpY1pKg4gl6G0kQoaKI7mrLHPg5
-----END CERTIFICATE-----
`

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

// TestOldCommandGatePlanDecodes: a plan a coordinator wrote before httpGet and cel
// existed (gates with only a command) decodes, validates and keeps its hash.
func TestOldCommandGatePlanDecodes(t *testing.T) {
	g := NewWithT(t)
	p := validPlan()
	p.Gates = []Gate{{Name: "lane-health", Command: []string{"/bin/true"}}}
	data, err := EncodePlan(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(ContainSubstring(`"gates":[{"name":"lane-health","command":["/bin/true"]}]`), "no new field appears in an old gate")
	got, err := DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Gates[0].Kind()).To(Equal(GateKindCommand))
	g.Expect(got.Gates[0].HTTPGet).To(BeNil())

	p.Gates = []Gate{{Name: "probe", HTTPGet: &HTTPGetGate{URL: "https://127.0.0.1:8443/readyz", CABundle: testCA}},
		{Name: "pods-ready", CEL: &CELGate{Expression: "pods.all(p, true)"}}}
	data, err = EncodePlan(p)
	g.Expect(err).NotTo(HaveOccurred())
	got, err = DecodePlan(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(p))
	g.Expect(got.Gates[0].Kind()).To(Equal(GateKindHTTPGet))
	g.Expect(got.Gates[1].Kind()).To(Equal(GateKindCEL))
}

// TestValidateGatesAtNamesWholePaths: every error of ValidateGatesAt begins with
// the list's path, the count error too, and naming one does not change the next.
func TestValidateGatesAtNamesWholePaths(t *testing.T) {
	g := NewWithT(t)
	gates := make([]Gate, MaxGates+1)
	for i := range gates {
		gates[i] = Gate{Name: fmt.Sprintf("g%d", i), Command: []string{"/bin/true"}}
	}
	gates[1].Name = "Bad_Name"
	var msgs []string
	for _, err := range ValidateGatesAt("gates[0].gates", gates) {
		msgs = append(msgs, err.Error())
	}
	g.Expect(msgs).To(Equal([]string{
		fmt.Sprintf("gates[0].gates: %d gates, more than %d", MaxGates+1, MaxGates),
		`gates[0].gates[1].name "Bad_Name" is not a DNS label (lower-case letters, digits and '-', at most 63)`,
	}))
}

// TestGateBounds: the bounds the agent runs a user gate with, and its worst case,
// from the gate's own fields and the agent's defaults; the policy's verifying
// deadline check and the agent's gate.Checker both take them from here.
func TestGateBounds(t *testing.T) {
	agent := AgentGateDefaults()
	tests := []struct {
		name          string
		timeout, pass int32
		def           GateBounds
		want          GateBounds
		wantMax       time.Duration
	}{
		{name: "neither set: the agent's gate timeout and command timeout", def: agent,
			want: GateBounds{PassWithin: 5 * time.Minute, Run: 30 * time.Second}, wantMax: 5*time.Minute + 30*time.Second},
		{name: "both set", timeout: 10, pass: 600, def: agent,
			want: GateBounds{PassWithin: 10 * time.Minute, Run: 10 * time.Second}, wantMax: 10*time.Minute + 10*time.Second},
		{name: "a run may be longer than the time to pass: a last run still gets all of it", timeout: 120, pass: 20, def: agent,
			want: GateBounds{PassWithin: 20 * time.Second, Run: 2 * time.Minute}, wantMax: 140 * time.Second},
		{name: "passWithin shorter than the command timeout bounds each run", pass: 20, def: agent,
			want: GateBounds{PassWithin: 20 * time.Second, Run: 20 * time.Second}, wantMax: 40 * time.Second},
		{name: "passWithin longer than the command timeout: the command timeout bounds each run", pass: 600, def: agent,
			want: GateBounds{PassWithin: 10 * time.Minute, Run: 30 * time.Second}, wantMax: 10*time.Minute + 30*time.Second},
		{name: "timeout only: the agent's gate timeout to pass", timeout: 5, def: agent,
			want: GateBounds{PassWithin: 5 * time.Minute, Run: 5 * time.Second}, wantMax: 5*time.Minute + 5*time.Second},
		{name: "another agent's defaults", def: GateBounds{PassWithin: 2 * time.Minute, Run: time.Second},
			want: GateBounds{PassWithin: 2 * time.Minute, Run: time.Second}, wantMax: 2*time.Minute + time.Second},
		{name: "no command timeout: passWithin bounds each run", pass: 7, def: GateBounds{PassWithin: time.Minute},
			want: GateBounds{PassWithin: 7 * time.Second, Run: 7 * time.Second}, wantMax: 14 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Gate{Name: "x", Command: []string{"/bin/true"}, TimeoutSeconds: tt.timeout, PassWithinSeconds: tt.pass}.Bounds(tt.def)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(got.Max()).To(Equal(tt.wantMax))
		})
	}
}

// TestGatesMax: gates run one after the other, so their worst cases add up.
func TestGatesMax(t *testing.T) {
	tests := []struct {
		name  string
		gates []Gate
		want  time.Duration
	}{
		{"none", nil, 0},
		{"one with the defaults", []Gate{{Name: "a"}}, 5*time.Minute + 30*time.Second},
		{"the sum, each by its own bounds", []Gate{{Name: "a"}, {Name: "b", TimeoutSeconds: 10, PassWithinSeconds: 600}, {Name: "c", PassWithinSeconds: 20}},
			5*time.Minute + 30*time.Second + 10*time.Minute + 10*time.Second + 40*time.Second},
		{"the bounds' most", []Gate{{Name: "a", TimeoutSeconds: MaxGateSeconds, PassWithinSeconds: MaxGateSeconds}}, 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(GatesMax(tt.gates, AgentGateDefaults())).To(Equal(tt.want))
		})
	}
}
