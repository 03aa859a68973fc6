package status

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// poolPolicy has a workers pool (budget 1, Saturday windows in Berlin, soak) for
// the Machines of MachineDeployment md-0, an unbudgeted edge pool for md-edge,
// and leaves the control plane in the default pool.
const poolPolicy = `
fleet:
- name: workers
  machineSelector:
    matchLabels: {cluster.x-k8s.io/deployment-name: md-0}
  maintenanceWindows: ["Sat 02:00-06:00 Europe/Berlin"]
  soakSeconds: 300
  expectedDurationSeconds: 900
- name: edge
  machineSelector:
    matchLabels: {cluster.x-k8s.io/deployment-name: md-edge}
  failureBudget: 0
`

func inDeployment(md string) machineOpt {
	return func(m *clusterv1.Machine) {
		m.Labels = map[string]string{clusterv1.MachineDeploymentNameLabel: md}
	}
}

func TestBuildPools(t *testing.T) {
	pol, err := policy.Parse([]byte(poolPolicy))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	machines := []clusterv1.Machine{
		machine("w2", inDeployment("md-0")), machine("cp", controlPlane), machine("w1", inDeployment("md-0")), machine("e1", inDeployment("md-edge")),
	}
	withFleet := func(st fleet.State, ann map[string]string) clusterv1.Cluster {
		c := cluster("demo")
		c.Annotations = map[string]string{inplacev1.FleetStateAnnotation: st.Encode()}
		for k, v := range ann {
			c.Annotations[k] = v
		}
		return c
	}
	spent := fleet.State{Failures: []fleet.Failure{
		{Machine: "w1", Node: "w1", Pool: "workers", Cause: "RolledBack: GateFailed", Plan: "p"},
		{Machine: "e1", Node: "e1", Pool: "edge", Cause: "Failed: ApplyFailed", Plan: "p"},
	}}
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	cpPool := PoolView{Name: "", Machines: []string{"cp"}, FailureBudget: 1, WindowOpen: true, ExpectedSeconds: 1800}
	edgePool := PoolView{Name: "edge", Machines: []string{"e1"}, FailureBudget: 0, Failures: 1, WindowOpen: true, ExpectedSeconds: 1800}
	workers := PoolView{Name: "workers", Machines: []string{"w1", "w2"}, FailureBudget: 1, Failures: 1, BudgetSpent: true,
		Windows: []string{"Sat 02:00-06:00 Europe/Berlin"}, WindowsSource: WindowsFromPolicy,
		NextOpening: at("2026-12-05T01:00:00Z"), ExpectedSeconds: 900, SoakSeconds: 300} // now is Monday 09:00 UTC

	tests := []struct {
		name string
		c    clusterv1.Cluster
		want []PoolView
	}{
		{name: "policy windows closed, budget spent in one pool, none in another", c: withFleet(spent, nil), want: []PoolView{cpPool, edgePool, workers}},
		{
			name: "the Cluster's windows replace the policy's: open long enough",
			c:    withFleet(fleet.State{}, map[string]string{inplacev1.MaintenanceWindowsAnnotation: "Mon 08:00-10:00 UTC"}),
			want: []PoolView{
				{Name: "", Machines: []string{"cp"}, FailureBudget: 1, Windows: []string{"Mon 08:00-10:00 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowOpen: true, WindowCloses: at("2026-11-30T10:00:00Z"), ExpectedSeconds: 1800},
				{Name: "edge", Machines: []string{"e1"}, Windows: []string{"Mon 08:00-10:00 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowOpen: true, WindowCloses: at("2026-11-30T10:00:00Z"), ExpectedSeconds: 1800},
				{Name: "workers", Machines: []string{"w1", "w2"}, FailureBudget: 1, Windows: []string{"Mon 08:00-10:00 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowOpen: true, WindowCloses: at("2026-11-30T10:00:00Z"), ExpectedSeconds: 900, SoakSeconds: 300},
			},
		},
		{
			// The measured 66 min, at most twice each pool's own expectation (60 min;
			// 30 min for workers), do not fit the half hour left before 09:30: the next
			// Monday's opening does; the workers' 30 min do fit.
			name: "open but too short for the measured duration",
			c:    withFleet(fleet.State{DurationsSeconds: []int64{600, 4000}}, map[string]string{inplacev1.MaintenanceWindowsAnnotation: "Mon 08:00-09:30 UTC"}),
			want: []PoolView{
				{Name: "", Machines: []string{"cp"}, FailureBudget: 1, Windows: []string{"Mon 08:00-09:30 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowCloses: at("2026-11-30T09:30:00Z"), NextOpening: at("2026-12-07T08:00:00Z"), ExpectedSeconds: 3600},
				{Name: "edge", Machines: []string{"e1"}, Windows: []string{"Mon 08:00-09:30 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowCloses: at("2026-11-30T09:30:00Z"), NextOpening: at("2026-12-07T08:00:00Z"), ExpectedSeconds: 3600},
				{Name: "workers", Machines: []string{"w1", "w2"}, FailureBudget: 1, Windows: []string{"Mon 08:00-09:30 UTC"}, WindowsSource: WindowsFromAnnotation,
					WindowOpen: true, WindowCloses: at("2026-11-30T09:30:00Z"), ExpectedSeconds: 1800, SoakSeconds: 300},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := BuildWithPools(Snapshot{Clusters: []ClusterSnapshot{{Cluster: tt.c, Machines: machines}}}, now, pol)
			g.Expect(r.Clusters).To(HaveLen(1))
			g.Expect(r.Clusters[0].Pools).To(Equal(tt.want))
		})
	}

	t.Run("windows that do not parse hold every pool", func(t *testing.T) {
		g := NewWithT(t)
		c := withFleet(fleet.State{}, map[string]string{inplacev1.MaintenanceWindowsAnnotation: "Someday 25:00-26:00 UTC"})
		pools := BuildWithPools(Snapshot{Clusters: []ClusterSnapshot{{Cluster: c, Machines: machines[:2]}}}, now, pol).Clusters[0].Pools
		g.Expect(pools).To(HaveLen(2))
		for _, p := range pools {
			g.Expect(p.WindowOpen).To(BeFalse())
			g.Expect(p.WindowError).NotTo(BeEmpty())
			g.Expect(p.Windows).To(Equal([]string{"Someday 25:00-26:00 UTC"}))
			g.Expect(p.WindowsSource).To(Equal(WindowsFromAnnotation))
		}
	})

	t.Run("without a policy there are no pools, and the JSON has no pools field", func(t *testing.T) {
		g := NewWithT(t)
		r := BuildWithPools(Snapshot{Clusters: []ClusterSnapshot{{Cluster: withFleet(spent, nil), Machines: machines}}}, now, nil)
		g.Expect(r.Clusters[0].Pools).To(BeNil())
		g.Expect(r).To(Equal(Build(Snapshot{Clusters: []ClusterSnapshot{{Cluster: withFleet(spent, nil), Machines: machines}}}, now)))
		b, err := json.Marshal(r)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)).NotTo(ContainSubstring(`"pools"`))
	})

	t.Run("download windows: the policy's, which the Cluster's annotation replaces", func(t *testing.T) {
		dl, err := policy.Parse([]byte(`
fleet:
- name: stores
  maintenanceWindows: ["Sat 02:00-06:00 UTC"]
  downloadWindows: ["Mon-Fri 22:00-06:00 UTC"]
`))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		closed, open := false, true
		tests := []struct {
			name       string
			ann        map[string]string
			windows    []string
			source     string
			open       *bool
			next       *time.Time
			wantErr    bool
			renderTail string
		}{
			{name: "the policy's, closed", windows: []string{"Mon-Fri 22:00-06:00 UTC"}, source: WindowsFromPolicy, open: &closed,
				next: at("2026-11-30T22:00:00Z"), renderTail: "; download window closed, next opening 2026-11-30T22:00:00Z\n"},
			{name: "the Cluster's, open", ann: map[string]string{inplacev1.DownloadWindowsAnnotation: "Mon 08:00-10:00 UTC"},
				windows: []string{"Mon 08:00-10:00 UTC"}, source: WindowsFromAnnotation, open: &open, renderTail: "; download window open\n"},
			{name: "the Cluster's empty annotation: any time", ann: map[string]string{inplacev1.DownloadWindowsAnnotation: ""},
				renderTail: "next opening 2026-12-05T02:00:00Z\n"},
			{name: "the Cluster's do not parse", ann: map[string]string{inplacev1.DownloadWindowsAnnotation: "Someday 01:00-02:00 UTC"},
				windows: []string{"Someday 01:00-02:00 UTC"}, source: WindowsFromAnnotation, wantErr: true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				pools := BuildWithPools(Snapshot{Clusters: []ClusterSnapshot{{Cluster: withFleet(fleet.State{}, tt.ann), Machines: machines[:1]}}}, now, dl).Clusters[0].Pools
				g.Expect(pools).To(HaveLen(1))
				p := pools[0]
				g.Expect(p.DownloadWindows).To(Equal(tt.windows))
				g.Expect(p.DownloadWindowsSource).To(Equal(tt.source))
				g.Expect(p.DownloadWindowOpen).To(Equal(tt.open))
				g.Expect(p.DownloadNextOpening).To(Equal(tt.next))
				g.Expect(p.DownloadWindowError != "").To(Equal(tt.wantErr))
				var buf bytes.Buffer
				renderPools(&buf, pools, false)
				if tt.wantErr {
					g.Expect(buf.String()).To(ContainSubstring("; download windows invalid, every download held: "))
				} else {
					g.Expect(buf.String()).To(HaveSuffix(tt.renderTail))
				}
			})
		}
	})

	t.Run("table and wide lines", func(t *testing.T) {
		g := NewWithT(t)
		c := withFleet(spent, nil)
		pools := BuildWithPools(Snapshot{Clusters: []ClusterSnapshot{{Cluster: c, Machines: machines}}}, now, pol).Clusters[0].Pools
		var table, wide bytes.Buffer
		renderPools(&table, pools, false)
		renderPools(&wide, pools, true)
		g.Expect(table.String()).To(Equal(`  pool (default): 1 machine; budget 0 of 1 spent; window always open
  pool edge: 1 machine; no failure budget (1 failure(s) recorded); window always open
  pool workers: 2 machines; budget 1 of 1 spent, halted (annotate the Cluster with inplace.capi-inplace.dev/resume to continue); window closed, next opening 2026-12-05T01:00:00Z
`))
		g.Expect(wide.String()).To(Equal(`  pool (default): 1 machine; budget 0 of 1 spent; window always open; expected 30m00s; cp
  pool edge: 1 machine; no failure budget (1 failure(s) recorded); window always open; expected 30m00s; e1
  pool workers: 2 machines; budget 1 of 1 spent, halted (annotate the Cluster with inplace.capi-inplace.dev/resume to continue); window closed, next opening 2026-12-05T01:00:00Z; windows (policy) "Sat 02:00-06:00 Europe/Berlin"; expected 15m00s; soak 5m00s; w1, w2
`))

		var short bytes.Buffer
		renderPools(&short, []PoolView{
			{Name: "p", Machines: []string{"a"}, FailureBudget: 2, Windows: []string{"Mon 08:00-10:00 UTC"}, WindowCloses: at("2026-11-30T10:00:00Z"),
				NextOpening: at("2026-12-07T08:00:00Z"), ExpectedSeconds: 2400},
			{Name: "q", Machines: []string{"b"}, FailureBudget: 1, Windows: []string{"Mon 08:00-10:00 UTC"}, WindowOpen: true,
				WindowCloses: at("2026-11-30T10:00:00Z"), ExpectedSeconds: 600},
		}, false)
		g.Expect(short.String()).To(Equal(`  pool p: 1 machine; budget 0 of 2 spent; window open but closes 2026-11-30T10:00:00Z, before the expected 40m00s would end, next opening 2026-12-07T08:00:00Z
  pool q: 1 machine; budget 0 of 1 spent; window open, closes 2026-11-30T10:00:00Z
`))
	})
}
