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
