package policy

import (
	"fmt"
	"slices"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// GatePoolConfig gives the Machines of one pool user-defined health gates:
//
//	gates:
//	- cluster: realnode/realnode
//	  machineSelector:
//	    matchExpressions:
//	    - {key: cluster.x-k8s.io/control-plane, operator: Exists}
//	  gates:
//	  - name: lane-health
//	    command: ["/bin/sh", "-c", "test -f /etc/realnode/healthy"]
//	    passWithinSeconds: 20
//
// A Machine gets the gates of every pool that selects it, in the policy's order,
// after the agent's built-in gates.
type GatePoolConfig struct {
	PoolSelector `json:",inline"`
	// Gates run on every node of the pool before its update is committed.
	Gates []GateConfig `json:"gates"`
}

// GateConfig is one user-defined health gate: a command the agent runs on the
// host (chrooted into the host root, as root) that must exit 0. Its rule is
// protocol.ValidateGates.
type GateConfig struct {
	// Name is a DNS label, unique in the pool; it names the gate in status.
	Name string `json:"name"`
	// Command is the argv; argv[0] is an absolute path on the host.
	Command []string `json:"command"`
	// TimeoutSeconds bounds one run of the command; 0: the agent's command
	// timeout (30 s). At most 3600.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PassWithinSeconds is how long the gate may take to pass, running the
	// command again until it exits 0; 0: the agent's --gate-timeout. At most 3600.
	PassWithinSeconds int32 `json:"passWithinSeconds,omitempty"`
}

// gatePool is a validated gates entry.
type gatePool struct {
	pool  machinePool
	gates []protocol.Gate
}

// compileGates validates the gates section.
func compileGates(cfg []GatePoolConfig) (pools []gatePool, errs []error) {
	for i, pc := range cfg {
		field := fmt.Sprintf("gates[%d]", i)
		pool, poolErrs := compilePool(field, pc.PoolSelector)
		errs = append(errs, poolErrs...)
		if len(pc.Gates) == 0 {
			errs = append(errs, fmt.Errorf("%s.gates is empty: the entry would change nothing", field))
		}
		gates := make([]protocol.Gate, 0, len(pc.Gates))
		for _, g := range pc.Gates {
			gates = append(gates, protocol.Gate{Name: g.Name, Command: slices.Clone(g.Command), TimeoutSeconds: g.TimeoutSeconds, PassWithinSeconds: g.PassWithinSeconds})
		}
		if err := protocol.ValidateGates(gates); err != nil {
			errs = append(errs, fmt.Errorf("%s.gates: %w", field, err))
		}
		pools = append(pools, gatePool{pool: pool, gates: gates})
	}
	return pools, errs
}

// Gates returns the user-defined gates of a Machine (by its namespace and labels;
// the cluster comes from CAPI's cluster-name label): those of every pool that
// selects it, in the policy's order, as copies the caller may keep; nil when
// there are none. Two selecting pools that name a gate alike, or more gates than
// a plan carries, are an error: which one the operator meant cannot be guessed.
func (p *Policy) Gates(namespace string, machineLabels map[string]string) ([]protocol.Gate, error) {
	var out []protocol.Gate
	for _, gp := range p.gatePools {
		if !gp.pool.selects(namespace, machineLabels) {
			continue
		}
		for _, g := range gp.gates {
			g.Command = slices.Clone(g.Command)
			out = append(out, g)
		}
	}
	if err := protocol.ValidateGates(out); err != nil {
		return nil, fmt.Errorf("gates of the pools that select the machine: %w", err)
	}
	return out, nil
}
