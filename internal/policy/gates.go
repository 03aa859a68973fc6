package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/celgate"
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
//	  - name: app-ready
//	    httpGet: {url: "https://127.0.0.1:8443/readyz", caBundle: "-----BEGIN CERTIFICATE-----..."}
//	    timeoutSeconds: 5
//	  - name: pods-ready
//	    cel:
//	      expression: pods.all(p, p.status.conditions.exists(c, c.type == "Ready" && c.status == "True"))
//	    passWithinSeconds: 300
//
// A Machine gets the gates of every pool that selects it, in the policy's order,
// after the agent's built-in gates. The agent runs them one after the other, so
// deadlines.verifyingSeconds must be longer than they may take together (each
// its passWithinSeconds plus one last run): a pool whose gates may not fit is
// refused when the policy loads, and the update of a Machine that several pools
// select fails, naming their gates, when theirs together may not fit.
type GatePoolConfig struct {
	PoolSelector `json:",inline"`
	// Gates run on every node of the pool before its update is committed.
	Gates []GateConfig `json:"gates"`
}

// GateConfig is one user-defined health gate of exactly one kind: a command the
// agent runs on the host (chrooted into the host root, as root) that must exit
// 0, an HTTP GET from the node whose status must be in the expected range, or a
// CEL expression over the node and its pods that must be true. Its rule is
// protocol.ValidateGates; a CEL expression is compiled at policy load
// (internal/celgate).
type GateConfig struct {
	// Name is a DNS label, unique in the pool; it names the gate in status.
	Name string `json:"name"`
	// Command is the argv; argv[0] is an absolute path on the host.
	Command []string `json:"command,omitempty"`
	// HTTPGet is a GET the agent sends from the node (docs/gates.md).
	HTTPGet *protocol.HTTPGetGate `json:"httpGet,omitempty"`
	// CEL is an expression over `node` and `pods` (docs/gates.md).
	CEL *protocol.CELGate `json:"cel,omitempty"`
	// TimeoutSeconds bounds one run of the gate (the command, the request, the
	// evaluation); 0: the agent's command timeout (30 s), or passWithinSeconds
	// when that is shorter. At most 3600.
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// PassWithinSeconds is how long the gate may take to pass: the agent runs
	// the gate again (every 2 s, backing off to 5 s) until it passes or the time
	// is up; 0: the agent's --gate-timeout. At most 3600.
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
			gates = append(gates, copyGate(protocol.Gate{Name: g.Name, Command: g.Command, HTTPGet: g.HTTPGet, CEL: g.CEL,
				TimeoutSeconds: g.TimeoutSeconds, PassWithinSeconds: g.PassWithinSeconds}))
		}
		if gateErrs := protocol.ValidateGatesAt(field+".gates", gates); len(gateErrs) > 0 {
			errs = append(errs, gateErrs...)
		} else {
			// The agent compiles the expression again; a bad one is refused here,
			// before any plan carries it.
			for j, g := range gates {
				if g.CEL == nil {
					continue
				}
				if _, err := celgate.Compile(g.CEL.Expression); err != nil {
					errs = append(errs, fmt.Errorf("%s.gates[%d].cel.expression: %w", field, j, err))
				}
			}
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
			out = append(out, copyGate(g))
		}
	}
	if err := protocol.ValidateGates(out); err != nil {
		return nil, fmt.Errorf("gates of the pools that select the machine: %w", err)
	}
	// Each pool's gates fit the section's deadline (New); several pools together,
	// or a deadlines pool's shorter deadline, may not.
	deadlines, byDefault := p.deadlinesFor(namespace, machineLabels)
	if err := gatesFitVerifying("the pools that select the machine", out, deadlines.Verifying, byDefault); err != nil {
		return nil, err
	}
	return out, nil
}

// gatesFitVerifying refuses gates that may together take as long as the
// verifying deadline or longer. The agent runs a node's gates one after the
// other in its Verifying phase, after its built-in gates, each until it passes
// or its own time is up; a deadline shorter than that lets the coordinator's
// watchdog mark a node Degraded, and leave it cordoned, while a slow gate still
// had time to pass, where the agent's own verdict would have been a pass or a
// named failed gate and a rollback. The worst case is protocol.GatesMax with the
// bounds of the agent the extension installs (protocol.AgentGateDefaults), the
// rule the agent runs gates by. The deadline must be longer, not merely as long:
// the built-in gates run first. They are not counted at their bound: theirs
// (the agent's gate timeout, up to five of them on a control plane) is a
// failure limit, where a user gate's passWithinSeconds is the operator's word on
// how long a healthy node may take; at their bound every deadline under 26
// minutes would be refused, user gates or none. who names the gates' pool in the
// error; byDefault says the deadline is the default, not the policy's.
func gatesFitVerifying(who string, gates []protocol.Gate, verifying time.Duration, byDefault bool) error {
	def := protocol.AgentGateDefaults()
	total := protocol.GatesMax(gates, def)
	if len(gates) == 0 || total < verifying {
		return nil
	}
	each := make([]string, 0, len(gates))
	for _, g := range gates {
		each = append(each, fmt.Sprintf("%s (up to %s)", g.Name, g.Bounds(def).Max()))
	}
	deadline := fmt.Sprintf("deadlines.verifyingSeconds %d (%s)", int64(verifying/time.Second), verifying)
	if byDefault {
		deadline = fmt.Sprintf("deadlines.verifyingSeconds %d (%s, the default)", int64(verifying/time.Second), verifying)
	}
	return fmt.Errorf("%s: the gates %s may take %s in all, not less than %s: the watchdog would mark a node Degraded, "+
		"and leave it cordoned, while its gates may still pass; set deadlines.verifyingSeconds above %d, with room for the built-in gates, "+
		"or lower the gates' passWithinSeconds (a gate may take its passWithinSeconds, else %s, plus one last run)",
		who, strings.Join(each, ", "), total, deadline, int64(total/time.Second), def.PassWithin)
}

// copyGate returns a gate that shares nothing with g.
func copyGate(g protocol.Gate) protocol.Gate {
	g.Command = slices.Clone(g.Command)
	if g.HTTPGet != nil {
		h := *g.HTTPGet
		g.HTTPGet = &h
	}
	if g.CEL != nil {
		c := *g.CEL
		g.CEL = &c
	}
	return g
}

// CELGates reports whether a gates entry that may select a Machine of the Cluster
// namespace/name has a CEL gate: the agent installed in that cluster then needs
// to list pods (agentinstall.Config.CELGates). Machine selectors are not
// evaluated: the agent's permissions are one set per cluster, and the Machines a
// selector picks come and go.
func (p *Policy) CELGates(namespace, cluster string) bool {
	for _, gp := range p.gatePools {
		if gp.pool.cluster != "" && (gp.pool.namespace != namespace || gp.pool.cluster != cluster) {
			continue
		}
		for _, g := range gp.gates {
			if g.CEL != nil {
				return true
			}
		}
	}
	return false
}
