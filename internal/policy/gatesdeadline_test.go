package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestGatesFitTheVerifyingDeadline: a pool whose gates may together take as
// long as deadlines.verifyingSeconds or longer is refused when the policy loads
// (the extension at start, `policy validate`), naming the pool, each gate's worst
// case, their total and the deadline: past the deadline the watchdog would mark a
// node Degraded while its gates still had time to pass. Such policies loaded
// without a word before.
func TestGatesFitTheVerifyingDeadline(t *testing.T) {
	// defaultGates is n gates that set neither bound: 5m30s each with the agent's
	// defaults.
	defaultGates := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "  - {name: g%d, command: [/bin/true]}\n", i)
		}
		return b.String()
	}
	tests := []struct {
		name    string
		yaml    string
		wantErr []string // substrings of the one error; none: valid
	}{
		{
			name: "gates well within the deadline",
			yaml: "deadlines: {verifyingSeconds: 1900}\ngates:\n- gates:\n  - {name: app, command: [/bin/true], passWithinSeconds: 1800, timeoutSeconds: 30}\n",
		},
		{
			name: "one gate: passWithin plus its last run outlast the deadline",
			yaml: "deadlines: {verifyingSeconds: 1800}\ngates:\n- cluster: ns/c\n  machineSelector: {matchLabels: {cluster.x-k8s.io/deployment-name: md-0}}\n  gates:\n  - {name: app, command: [/bin/true], passWithinSeconds: 1800, timeoutSeconds: 30}\n",
			wantErr: []string{"gates[0] (cluster ns/c, Machines cluster.x-k8s.io/deployment-name=md-0): the gates app (up to 30m30s) may take 30m30s in all",
				"not less than deadlines.verifyingSeconds 1800 (30m0s)", "set deadlines.verifyingSeconds above 1830"},
		},
		{
			name: "exactly the deadline leaves nothing for the built-in gates: refused",
			yaml: "gates:\n- gates:\n  - {name: app, command: [/bin/true], passWithinSeconds: 3570, timeoutSeconds: 30}\n",
			wantErr: []string{"gates[0] (every cluster): the gates app (up to 1h0m0s) may take 1h0m0s in all",
				"not less than deadlines.verifyingSeconds 3600 (1h0m0s, the default)"},
		},
		{
			name: "gates without bounds count at the agent's defaults: ten fit the default deadline",
			yaml: "gates:\n- gates:\n" + defaultGates(10),
		},
		{
			name:    "gates without bounds count at the agent's defaults: eleven do not",
			yaml:    "gates:\n- gates:\n" + defaultGates(11),
			wantErr: []string{"gates[0] (every cluster): the gates g0 (up to 5m30s), g1 (up to 5m30s),", "g10 (up to 5m30s) may take 1h0m30s in all", "its passWithinSeconds, else 5m0s, plus one last run", "(1h0m0s, the default)"},
		},
		{
			name: "the sum of several gates, each by its own bounds",
			yaml: "deadlines: {verifyingSeconds: 390}\ngates:\n- gates:\n  - {name: ok, command: [/bin/true]}\n" +
				"- machineSelector: {matchExpressions: [{key: cluster.x-k8s.io/control-plane, operator: Exists}]}\n  gates:\n" +
				"  - {name: a, command: [/bin/true], passWithinSeconds: 120}\n  - {name: b, httpGet: {url: \"http://127.0.0.1:8080/healthz\"}, passWithinSeconds: 200, timeoutSeconds: 5}\n" +
				"  - {name: c, cel: {expression: \"true\"}, passWithinSeconds: 20}\n",
			wantErr: []string{"gates[1] (every cluster, Machines cluster.x-k8s.io/control-plane): the gates a (up to 2m30s), b (up to 3m25s), c (up to 40s) may take 6m35s in all", "deadlines.verifyingSeconds 390 (6m30s)"},
		},
		{
			name:    "a run longer than passWithin counts whole",
			yaml:    "deadlines: {verifyingSeconds: 100}\ngates:\n- gates:\n  - {name: slow, command: [/bin/true], passWithinSeconds: 10, timeoutSeconds: 90}\n",
			wantErr: []string{"the gates slow (up to 1m40s) may take 1m40s in all", "not less than deadlines.verifyingSeconds 100 (1m40s)"},
		},
		{
			name:    "an invalid deadline is reported alone",
			yaml:    "deadlines: {verifyingSeconds: 0}\ngates:\n- gates:\n  - {name: app, command: [/bin/true], passWithinSeconds: 3600}\n",
			wantErr: []string{"deadlines.verifyingSeconds 0 must be between 1 and 604800"},
		},
		{
			name:    "invalid gates are reported alone",
			yaml:    "deadlines: {verifyingSeconds: 10}\ngates:\n- gates:\n  - {name: app, command: [/bin/true], passWithinSeconds: 3601}\n",
			wantErr: []string{"gates[0].gates[0].passWithinSeconds 3601 is not between 0 and 3600"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Parse([]byte(tt.yaml))
			if len(tt.wantErr) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ErrInvalid))
			var invalid *InvalidError
			g.Expect(errors.As(err, &invalid)).To(BeTrue(), "error %v", err)
			g.Expect(invalid.Problems).To(HaveLen(1), "one problem: %v", err)
			for _, want := range tt.wantErr {
				g.Expect(invalid.Problems[0].Error()).To(ContainSubstring(want))
			}
		})
	}
}

// TestGatesOfOverlappingPoolsFitTheVerifyingDeadline: a Machine gets the gates of
// every pool that selects it, run one after the other. Each pool below fits the
// deadline; a Machine in both gets gates that do not, and its plan is refused
// with the same rule rather than failing at the deadline (the coordinator makes
// the error an input error of the update).
func TestGatesOfOverlappingPoolsFitTheVerifyingDeadline(t *testing.T) {
	p, err := Parse([]byte(`
deadlines: {verifyingSeconds: 1200}
gates:
- machineSelector: {matchLabels: {tier: app}}
  gates:
  - {name: app, command: [/bin/true], passWithinSeconds: 600}
- machineSelector: {matchLabels: {gpu: "true"}}
  gates:
  - {name: gpu, command: [/bin/true], passWithinSeconds: 600}
`))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	tests := []struct {
		name    string
		labels  map[string]string
		want    []string
		wantErr string
	}{
		{name: "one pool", labels: map[string]string{"tier": "app"}, want: []string{"app"}},
		{name: "the other pool", labels: map[string]string{"gpu": "true"}, want: []string{"gpu"}},
		{name: "both pools: 21m of gates, not less than 20m", labels: map[string]string{"tier": "app", "gpu": "true"},
			wantErr: "the pools that select the machine: the gates app (up to 10m30s), gpu (up to 10m30s) may take 21m0s in all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gates, err := p.Gates("ns", tt.labels)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(err).To(MatchError(ContainSubstring("deadlines.verifyingSeconds 1200 (20m0s)")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var names []string
			for _, gt := range gates {
				names = append(names, gt.Name)
			}
			g.Expect(names).To(Equal(tt.want))
		})
	}
}
