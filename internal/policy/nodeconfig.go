package policy

import (
	"encoding/json"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
)

// OSBackendsPoolConfig gives the nodes of one pool their OS backend configuration
// (the content of /etc/capi-inplace/os-backends.json, registry.Config), so that a
// new pool needs no file written by hand on its nodes:
//
//	osBackends:
//	- cluster: edge/site-a
//	  machineSelector:
//	    matchLabels: {cluster.x-k8s.io/deployment-name: rauc-pool}
//	  config:
//	    rauc: {conf: /etc/rauc/system.conf}
//
// The plan of a node that changes its OS image carries its pool's configuration;
// the agent writes it to the host before it stages the image, and restarts once to
// load it when it changed. The first pool that selects a Machine wins.
type OSBackendsPoolConfig struct {
	PoolSelector `json:",inline"`
	// Config is the node's OS backend configuration: the content of
	// /etc/capi-inplace/os-backends.json (registry.Config; its keys in
	// docs/backends.md, "Node configuration"), checked as the agent reads it.
	Config json.RawMessage `json:"config"`
}

type osBackendsPool struct {
	pool   machinePool
	config json.RawMessage // compact JSON
}

func compileOSBackends(cfg []OSBackendsPoolConfig) (pools []osBackendsPool, errs []error) {
	for i, pc := range cfg {
		field := fmt.Sprintf("osBackends[%d]", i)
		pool, poolErrs := compilePool(field, pc.PoolSelector)
		errs = append(errs, poolErrs...)
		if len(pc.Config) == 0 {
			errs = append(errs, fmt.Errorf("%s.config is empty", field))
			continue
		}
		parsed, err := registry.Parse(pc.Config)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.config: %w", field, err))
			continue
		}
		compact, err := json.Marshal(parsed)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.config: %w", field, err))
			continue
		}
		pools = append(pools, osBackendsPool{pool: pool, config: compact})
	}
	return pools, errs
}

// OSBackends returns the OS backend configuration of a Machine's pool (by its
// namespace and labels), or nil when no pool of the policy selects it (the node
// keeps the file it has).
func (p *Policy) OSBackends(namespace string, machineLabels map[string]string) json.RawMessage {
	for _, op := range p.osBackendPools {
		if op.pool.selects(namespace, machineLabels) {
			return append(json.RawMessage(nil), op.config...)
		}
	}
	return nil
}
