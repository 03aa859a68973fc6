package policy

import (
	"fmt"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

// FleetPoolConfig sets the fleet controls of one pool of Machines
// (docs/fleet-controls.md):
//
//	fleet:
//	- name: workers
//	  cluster: prod/edge-1
//	  machineSelector:
//	    matchLabels: {cluster.x-k8s.io/deployment-name: md-0}
//	  failureBudget: 1
//	  maintenanceWindows: ["Mon-Fri 22:00-04:00 Europe/Berlin"]
//	  downloadWindows: ["Mon-Fri 01:00-05:00 Europe/Berlin"]
//	  soakSeconds: 300
//
// A Machine gets the first entry that selects it; Machines no entry selects get
// a failure budget of 1 for their whole cluster and no windows or soak.
type FleetPoolConfig struct {
	PoolSelector `json:",inline"`
	// Name identifies the pool in the failure record and in status; unique. Pools
	// of different names keep separate budgets.
	Name string `json:"name"`
	// FailureBudget is how many failed or rolled-back nodes halt the pool's new
	// node updates; default 1; 0 disables the budget.
	FailureBudget *int32 `json:"failureBudget,omitempty"`
	// MaintenanceWindows are weekly windows ("Mon-Fri 22:00-04:00 Europe/Berlin")
	// or cron windows ("cron 0 22 * * Mon-Fri 6h Europe/Berlin"), see
	// fleet.ParseWindows; node updates start only inside one, and only when
	// the expected duration ends before it closes. Empty: always open. A Cluster's
	// inplace.capi-inplace.dev/maintenance-windows annotation overrides them.
	MaintenanceWindows []string `json:"maintenanceWindows,omitempty"`
	// DownloadWindows, in the syntax of MaintenanceWindows, are when a node update
	// that a closed maintenance window holds may begin staging its artifacts
	// (downloads, verified by digest; nothing on the node changes), so that the
	// maintenance window is spent on the switch alone. Empty: staging ahead may
	// begin any time. Inside an open maintenance window an update stages what is
	// still missing whatever these say. A Cluster's
	// inplace.capi-inplace.dev/download-windows annotation overrides them.
	DownloadWindows []string `json:"downloadWindows,omitempty"`
	// SoakSeconds is how long the pool's last updated node must stay Ready before
	// the next node starts; 0: no soak.
	SoakSeconds int32 `json:"soakSeconds,omitempty"`
	// ExpectedDurationSeconds is how long a node update is assumed to take before
	// one was measured on the cluster; default 1800.
	ExpectedDurationSeconds int32 `json:"expectedDurationSeconds,omitempty"`
}

type fleetPool struct {
	pool machinePool
	cfg  fleet.Pool
}

func compileFleet(cfg []FleetPoolConfig) (pools []fleetPool, errs []error) {
	names := map[string]bool{}
	for i, fc := range cfg {
		field := fmt.Sprintf("fleet[%d]", i)
		pool, poolErrs := compilePool(field, fc.PoolSelector)
		errs = append(errs, poolErrs...)
		fp := fleet.DefaultPool()
		fp.Name = fc.Name
		switch {
		case fc.Name == "":
			errs = append(errs, fmt.Errorf("%s.name is empty: the failure record names each pool", field))
		case names[fc.Name]:
			errs = append(errs, fmt.Errorf("%s.name %q is used twice: pools of one name would share a budget", field, fc.Name))
		}
		names[fc.Name] = true
		if fc.FailureBudget != nil {
			if *fc.FailureBudget < 0 {
				errs = append(errs, fmt.Errorf("%s.failureBudget %d is negative (0 disables the budget)", field, *fc.FailureBudget))
			}
			fp.Budget = fleet.Budget(*fc.FailureBudget)
		}
		for j, w := range fc.MaintenanceWindows {
			s, err := fleet.ParseWindows(w)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.maintenanceWindows[%d]: %w", field, j, err))
			}
			fp.Windows = append(fp.Windows, s...)
		}
		for j, w := range fc.DownloadWindows {
			s, err := fleet.ParseWindows(w)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.downloadWindows[%d]: %w", field, j, err))
			}
			fp.DownloadWindows = append(fp.DownloadWindows, s...)
		}
		if fc.SoakSeconds < 0 || fc.ExpectedDurationSeconds < 0 {
			errs = append(errs, fmt.Errorf("%s: soakSeconds and expectedDurationSeconds must not be negative", field))
		}
		fp.Soak = time.Duration(fc.SoakSeconds) * time.Second
		if fc.ExpectedDurationSeconds > 0 {
			fp.ExpectedDuration = time.Duration(fc.ExpectedDurationSeconds) * time.Second
		}
		pools = append(pools, fleetPool{pool: pool, cfg: fp})
	}
	return pools, errs
}

// FleetPool returns the fleet controls of a Machine (by its namespace and labels):
// the first entry that selects it, or fleet.DefaultPool.
func (p *Policy) FleetPool(namespace string, machineLabels map[string]string) fleet.Pool {
	for _, fp := range p.fleetPools {
		if fp.pool.selects(namespace, machineLabels) {
			return fp.cfg
		}
	}
	return fleet.DefaultPool()
}
