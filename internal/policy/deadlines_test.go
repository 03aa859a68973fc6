package policy

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestDeadlines(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    Deadlines
		wantErr string
	}{
		{name: "defaults", yaml: "{}", want: Deadlines{Staging: 30 * time.Minute, Pickup: 5 * time.Minute, Applying: time.Hour,
			Rebooting: 30 * time.Minute, Verifying: time.Hour}},
		{name: "each phase set, hold kept", yaml: `
deadlines: {stagingSeconds: 60, pickupSeconds: 120, applyingSeconds: 180, rebootingSeconds: 240, verifyingSeconds: 300, keepRemediationHold: true}`,
			want: Deadlines{Staging: time.Minute, Pickup: 2 * time.Minute, Applying: 3 * time.Minute, Rebooting: 4 * time.Minute,
				Verifying: 5 * time.Minute, KeepRemediationHold: true}},
		{name: "zero is no deadline: refused", yaml: "deadlines: {rebootingSeconds: 0}", wantErr: "deadlines.rebootingSeconds 0 must be between 1 and 604800"},
		{name: "negative: refused", yaml: "deadlines: {pickupSeconds: -1}", wantErr: "deadlines.pickupSeconds -1"},
		{name: "over a week: refused", yaml: "deadlines: {applyingSeconds: 604801}", wantErr: "deadlines.applyingSeconds 604801"},
		{name: "unknown field: refused", yaml: "deadlines: {drainSeconds: 5}", wantErr: "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			p, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(p.Deadlines()).To(Equal(tt.want))
		})
	}
}

// TestDeadlinesPools: the first deadlines pool that selects a Machine sets the
// deadlines it names; the rest, and Machines no pool selects, take the section's.
func TestDeadlinesPools(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(`
deadlines:
  applyingSeconds: 1200
  pools:
  - cluster: edge/store-42
    machineSelector:
      matchLabels: {cluster.x-k8s.io/deployment-name: md-metal}
    rebootingSeconds: 3600
    keepRemediationHold: true
  - cluster: edge/store-42
    applyingSeconds: 60
    pickupSeconds: 30
`))
	g.Expect(err).NotTo(HaveOccurred())
	section := Deadlines{Staging: 30 * time.Minute, Pickup: 5 * time.Minute, Applying: 20 * time.Minute, Rebooting: 30 * time.Minute, Verifying: time.Hour}
	metal := section
	metal.Rebooting, metal.KeepRemediationHold = time.Hour, true
	rest := section
	rest.Applying, rest.Pickup = time.Minute, 30*time.Second
	for _, tc := range []struct {
		name      string
		namespace string
		labels    map[string]string
		want      Deadlines
	}{
		{"the metal pool (first match wins)", "edge", map[string]string{clusterNameLabel: "store-42", "cluster.x-k8s.io/deployment-name": "md-metal"}, metal},
		{"the cluster's other Machines", "edge", map[string]string{clusterNameLabel: "store-42", "cluster.x-k8s.io/deployment-name": "md-0"}, rest},
		{"another cluster", "edge", map[string]string{clusterNameLabel: "store-43"}, section},
		{"the same name in another namespace", "lab", map[string]string{clusterNameLabel: "store-42"}, section},
	} {
		g.Expect(p.DeadlinesFor(tc.namespace, tc.labels)).To(Equal(tc.want), tc.name)
	}
	g.Expect(p.Deadlines()).To(Equal(section))

	for _, bad := range []struct{ yaml, err string }{
		{"deadlines: {pools: [{cluster: a/b, applyingSeconds: 0}]}", "deadlines.pools[0].applyingSeconds 0 must be between 1 and 604800"},
		{"deadlines: {pools: [{cluster: a/b}]}", "deadlines.pools[0] sets no deadline"},
		{"deadlines: {pools: [{cluster: ab, applyingSeconds: 5}]}", `deadlines.pools[0].cluster "ab" is not <namespace>/<cluster>`},
		{"deadlines: {pools: [{cluster: a/b, drainSeconds: 5}]}", "unknown field"},
	} {
		_, err := Parse([]byte(bad.yaml))
		g.Expect(err).To(MatchError(ContainSubstring(bad.err)), bad.yaml)
	}
}

// TestGatesFitThePoolsVerifyingDeadline: a Machine whose deadlines pool gives it
// a verifying deadline shorter than its gates may take gets an error for its
// update, naming the deadline; the policy itself loads (pools may not overlap).
func TestGatesFitThePoolsVerifyingDeadline(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(`
gates:
- cluster: edge/store-42
  gates:
  - {name: soak, command: [/bin/true], passWithinSeconds: 600}
deadlines:
  pools:
  - cluster: edge/store-42
    machineSelector: {matchLabels: {fast: "true"}}
    verifyingSeconds: 300
`))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = p.Gates("edge", map[string]string{clusterNameLabel: "store-42"})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = p.Gates("edge", map[string]string{clusterNameLabel: "store-42", "fast": "true"})
	g.Expect(err).To(MatchError(ContainSubstring("deadlines.verifyingSeconds 300")))
}

// TestOperationsDocsDeadlinesExample: the deadlines example in
// docs/operations.md parses and states the defaults.
func TestOperationsDocsDeadlinesExample(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile("../../docs/operations.md")
	g.Expect(err).NotTo(HaveOccurred())
	var example string
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		if strings.HasPrefix(b[1], "deadlines:") {
			example = b[1]
		}
	}
	g.Expect(example).NotTo(BeEmpty(), "docs/operations.md has no yaml block starting with deadlines:")
	p, err := Parse([]byte(example))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Deadlines()).To(Equal(Builtin().Deadlines()), "the example shows the defaults")
}
