package policy

import (
	"fmt"
	"time"
)

// DeadlinesConfig bounds each phase of a node update (docs/operations.md, "When an
// update passes a deadline"). The coordinator times every phase on its own clock,
// from when it first saw the phase; past a deadline the update fails with the
// phase, since when and what was last seen of the node:
//
//	deadlines:
//	  stagingSeconds: 1800     # download and verify, before cordon
//	  pickupSeconds: 300       # plan published, no word from the agent
//	  applyingSeconds: 3600    # the agent works on the plan
//	  rebootingSeconds: 1800   # the agent announced a reboot and has not reported since
//	  verifyingSeconds: 3600   # the agent's gates, then kubelet version and Ready
//	  keepRemediationHold: false
//
// Every value is optional (the defaults above) and must be positive: an update
// without a deadline can hold a node cordoned, out of MachineHealthCheck's reach,
// forever.
//
// verifyingSeconds must be longer than the user gates of one pool may take
// together, or the policy is refused (and than the gates of all the pools that
// select one Machine, or that Machine's update fails): the agent runs a node's
// gates one after the other, each until it passes or its passWithinSeconds (else
// the agent's 5 min) is up, plus one last run (timeoutSeconds, else 30 s, or
// passWithinSeconds when that is shorter). A shorter deadline would mark a node
// Degraded, and leave it cordoned, while its gates might still pass. The
// built-in gates run first and are not counted: leave them a few minutes.
type DeadlinesConfig struct {
	PhaseDeadlines `json:",inline"`
	// KeepRemediationHold keeps Cluster API's skip-remediation on the Machine of a
	// node left cordoned past a deadline (or Degraded), for a human to inspect it
	// first; an alert fires instead (CapiInplaceRemediationHeld). Default false:
	// the hold is released so that a MachineHealthCheck replaces the node.
	KeepRemediationHold bool `json:"keepRemediationHold,omitempty"`
	// Pools give the Machines of a pool deadlines of their own: the first entry
	// that selects a Machine sets the deadlines it names, and the rest come from
	// this section (e.g. a pool whose bare-metal firmware takes 40 minutes to
	// reboot, or a lab pool whose updates must fail fast).
	Pools []DeadlinesPoolConfig `json:"pools,omitempty"`
}

// PhaseDeadlines are the deadline of each phase, in seconds; an unset one takes
// the default (or, in a pool, the deadlines section's value).
type PhaseDeadlines struct {
	// StagingSeconds bounds staging: the agent downloads and verifies the
	// update's artifacts, before the node is cordoned. 1 to 604800 (a week).
	StagingSeconds *int32 `json:"stagingSeconds,omitempty"`
	// PickupSeconds bounds the wait for the agent's first word on a published
	// plan (an agent that runs answers within seconds). 1 to 604800.
	PickupSeconds *int32 `json:"pickupSeconds,omitempty"`
	// ApplyingSeconds bounds the agent's work on the plan (a kubeadm upgrade
	// with its etcd snapshot, files, the OS image). 1 to 604800.
	ApplyingSeconds *int32 `json:"applyingSeconds,omitempty"`
	// RebootingSeconds bounds a reboot: from the agent announcing it to its
	// next report. 1 to 604800.
	RebootingSeconds *int32 `json:"rebootingSeconds,omitempty"`
	// VerifyingSeconds bounds verification: the agent's gates, then the
	// kubelet's version and the Node's Ready. 1 to 604800, and longer than the
	// user gates of a Machine's pools may take together (see above).
	VerifyingSeconds *int32 `json:"verifyingSeconds,omitempty"`
}

// DeadlinesPoolConfig sets the deadlines of one pool of Machines:
//
//	deadlines:
//	  applyingSeconds: 3600
//	  pools:
//	  - cluster: edge/store-42
//	    machineSelector:
//	      matchLabels: {cluster.x-k8s.io/deployment-name: md-baremetal}
//	    rebootingSeconds: 3600
//	    keepRemediationHold: true
type DeadlinesPoolConfig struct {
	PoolSelector   `json:",inline"`
	PhaseDeadlines `json:",inline"`
	// KeepRemediationHold, when set, replaces the deadlines section's for the
	// pool's Machines.
	KeepRemediationHold *bool `json:"keepRemediationHold,omitempty"`
}

// Deadlines is the validated deadlines policy.
type Deadlines struct {
	Staging, Pickup, Applying, Rebooting, Verifying time.Duration
	KeepRemediationHold                             bool
}

// The default deadlines. Staging fetches an OS image of a few GiB over a slow
// site link; an agent answers a published plan within seconds (it watches its
// Node), so five minutes means it is not running; applying covers a kubeadm
// upgrade with its etcd snapshot; a bare-metal reboot with a slow firmware takes
// minutes, half an hour means it is not coming back; verifying covers the
// built-in gates (minutes each) and user gates (New refuses user gates that may
// take all of it: gatesFitVerifying).
const (
	DefaultStagingDeadline   = 30 * time.Minute
	DefaultPickupDeadline    = 5 * time.Minute
	DefaultApplyingDeadline  = 60 * time.Minute
	DefaultRebootingDeadline = 30 * time.Minute
	DefaultVerifyingDeadline = 60 * time.Minute
)

// maxDeadlineSeconds bounds a deadline to a week: longer is no deadline at all.
const maxDeadlineSeconds = 7 * 24 * 3600

// deadlinesPool is a validated DeadlinesPoolConfig: the pool's Machines get
// deadlines, the section's with the pool's values in place.
type deadlinesPool struct {
	pool      machinePool
	deadlines Deadlines
	// verifyingDefault: the pool's verifying deadline is the default (for errors).
	verifyingDefault bool
}

func compileDeadlines(cfg DeadlinesConfig) (Deadlines, []deadlinesPool, []error) {
	d := Deadlines{Staging: DefaultStagingDeadline, Pickup: DefaultPickupDeadline, Applying: DefaultApplyingDeadline,
		Rebooting: DefaultRebootingDeadline, Verifying: DefaultVerifyingDeadline, KeepRemediationHold: cfg.KeepRemediationHold}
	errs := d.set("deadlines", cfg.PhaseDeadlines)
	var pools []deadlinesPool
	for i, pc := range cfg.Pools {
		field := fmt.Sprintf("deadlines.pools[%d]", i)
		pool, poolErrs := compilePool(field, pc.PoolSelector)
		errs = append(errs, poolErrs...)
		pd := d
		errs = append(errs, pd.set(field, pc.PhaseDeadlines)...)
		if pc.KeepRemediationHold != nil {
			pd.KeepRemediationHold = *pc.KeepRemediationHold
		}
		if pc.PhaseDeadlines == (PhaseDeadlines{}) && pc.KeepRemediationHold == nil {
			errs = append(errs, fmt.Errorf("%s sets no deadline", field))
		}
		pools = append(pools, deadlinesPool{pool: pool, deadlines: pd,
			verifyingDefault: pc.VerifyingSeconds == nil && cfg.VerifyingSeconds == nil})
	}
	return d, pools, errs
}

// set replaces d's deadlines with those pd names; field names them in errors.
func (d *Deadlines) set(field string, pd PhaseDeadlines) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    *int32
		out  *time.Duration
	}{
		{"stagingSeconds", pd.StagingSeconds, &d.Staging},
		{"pickupSeconds", pd.PickupSeconds, &d.Pickup},
		{"applyingSeconds", pd.ApplyingSeconds, &d.Applying},
		{"rebootingSeconds", pd.RebootingSeconds, &d.Rebooting},
		{"verifyingSeconds", pd.VerifyingSeconds, &d.Verifying},
	} {
		if f.v == nil {
			continue
		}
		if *f.v <= 0 || *f.v > maxDeadlineSeconds {
			errs = append(errs, fmt.Errorf("%s.%s %d must be between 1 and %d (a week)", field, f.name, *f.v, maxDeadlineSeconds))
			continue
		}
		*f.out = time.Duration(*f.v) * time.Second
	}
	return errs
}

// Deadlines returns the deadlines section: the deadline of each phase of a node
// update for Machines no pool of it selects.
func (p *Policy) Deadlines() Deadlines { return p.deadlines }

// DeadlinesFor returns the deadlines of a Machine (by its namespace and labels):
// those of the first deadlines pool that selects it, else the section's.
func (p *Policy) DeadlinesFor(namespace string, machineLabels map[string]string) Deadlines {
	d, _ := p.deadlinesFor(namespace, machineLabels)
	return d
}

// deadlinesFor is DeadlinesFor, and whether its verifying deadline is the default.
func (p *Policy) deadlinesFor(namespace string, machineLabels map[string]string) (Deadlines, bool) {
	for _, dp := range p.deadlinePools {
		if dp.pool.selects(namespace, machineLabels) {
			return dp.deadlines, dp.verifyingDefault
		}
	}
	return p.deadlines, p.verifyingDefault
}
