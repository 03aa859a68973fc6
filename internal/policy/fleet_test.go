package policy

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

// fleetYAML is the example docs/fleet-controls.md shows.
const fleetYAML = `
fleet:
- name: edge-workers
  cluster: prod/edge-1
  machineSelector:
    matchLabels: {cluster.x-k8s.io/deployment-name: md-0}
  failureBudget: 2
  maintenanceWindows: ["Mon-Fri 22:00-04:00 Europe/Berlin", "Sat,Sun 00:00-24:00 Europe/Berlin", "cron 0 2 * * Sun 4h UTC"]
  downloadWindows: ["Mon-Fri 00:00-06:00 Europe/Berlin"]
  soakSeconds: 300
  expectedDurationSeconds: 900
- name: everything-else
  failureBudget: 0
`

func TestFleetPools(t *testing.T) {
	g := NewWithT(t)
	p, err := Parse([]byte(fleetYAML))
	g.Expect(err).NotTo(HaveOccurred())
	md0 := p.FleetPool("prod", map[string]string{clusterNameLabel: "edge-1", "cluster.x-k8s.io/deployment-name": "md-0"})
	g.Expect(md0.Name).To(Equal("edge-workers"))
	g.Expect(md0.Budget).To(Equal(fleet.Budget(2)))
	g.Expect(md0.Windows).To(HaveLen(3))
	g.Expect(md0.DownloadWindows).To(HaveLen(1))
	g.Expect(md0.Soak).To(Equal(5 * time.Minute))
	g.Expect(md0.ExpectedDuration).To(Equal(15 * time.Minute))

	other := p.FleetPool("prod", map[string]string{clusterNameLabel: "edge-2"})
	g.Expect(other.Name).To(Equal("everything-else"))
	g.Expect(other.Budget).To(Equal(fleet.Budget(0)), "0 disables the budget")
	g.Expect(other.ExpectedDuration).To(Equal(fleet.DefaultExpectedDuration))
	g.Expect(other.DownloadWindows).To(BeEmpty(), "none: staging ahead may begin any time")

	none, err := Parse([]byte("{}"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none.FleetPool("prod", map[string]string{clusterNameLabel: "x"})).To(Equal(fleet.DefaultPool()))
}

func TestFleetValidation(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"fleet: [{failureBudget: 1}]", "fleet[0].name is empty"},
		{"fleet: [{name: a}, {name: a}]", `fleet[1].name "a" is used twice`},
		{"fleet: [{name: a, failureBudget: -1}]", "fleet[0].failureBudget -1 is negative"},
		{"fleet: [{name: a, maintenanceWindows: ['Mon 22:00 UTC']}]", "fleet[0].maintenanceWindows[0]: invalid maintenance window"},
		{"fleet: [{name: a, maintenanceWindows: ['cron 0 22 * * * 6h']}]", `fleet[0].maintenanceWindows[0]: invalid maintenance window "cron 0 22 * * * 6h"`},
		{"fleet: [{name: a, downloadWindows: ['Mon-Fri 01:00-05:00']}]", "fleet[0].downloadWindows[0]: invalid maintenance window"},
		{"fleet: [{name: a, soakSeconds: -5}]", "must not be negative"},
		{"fleet: [{name: a, cluster: nope}]", `fleet[0].cluster "nope"`},
	} {
		_, err := Parse([]byte(tc.yaml))
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.yaml)
	}
}
