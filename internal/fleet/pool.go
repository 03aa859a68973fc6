package fleet

import "time"

// DefaultExpectedDuration is the expected length of a node update before any was
// measured on the cluster: conservative, so that the first node does not start
// minutes before its window closes.
const DefaultExpectedDuration = 30 * time.Minute

// Pool is the fleet policy of one pool of Machines.
type Pool struct {
	// Name identifies the pool in the failure record; "" is the whole cluster.
	Name string
	// Budget is how many failed nodes halt the pool (DefaultBudget when unset).
	Budget Budget
	// Windows are the pool's maintenance windows; empty: always open.
	Windows Schedule
	// DownloadWindows are when a node update held by a closed maintenance window
	// may begin staging (downloading and verifying) ahead of it; empty: any time.
	DownloadWindows Schedule
	// Soak is how long a finished node must stay healthy before the next starts.
	Soak time.Duration
	// ExpectedDuration is the expected update length before one was measured.
	ExpectedDuration time.Duration
}

// DefaultPool is the policy of Machines no pool selects.
func DefaultPool() Pool {
	return Pool{Budget: DefaultBudget, ExpectedDuration: DefaultExpectedDuration}
}
