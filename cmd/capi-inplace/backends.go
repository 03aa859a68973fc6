package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
)

// backendEnv is what a backend needs to be built on a node.
type backendEnv struct {
	// hostRoot is the host's root directory as seen by the agent.
	hostRoot string
	// runner runs commands on the host.
	runner backend.Runner
	// simulate is set for `agent --simulate`: only then the simulated backend exists.
	simulate bool
}

// newBackends returns the OS backends available to the agent, by name. Add a real
// backend here with one line: its name and how to build it from env.
func newBackends(env backendEnv) map[string]backend.Backend {
	out := map[string]backend.Backend{
		none.Name: none.New(),
	}
	if env.simulate {
		out[simulated.Name] = simulated.New(env.hostRoot)
		return out
	}
	// The real OS backends this node is configured with (registry.ConfigPath on
	// the host). A misconfigured one is registered as registry.Unavailable, so a
	// plan naming it fails with the configuration error.
	configured, err := registry.Load(context.Background(), registry.Env{HostRoot: env.hostRoot, Runner: env.runner})
	if err != nil {
		configured = map[string]backend.Backend{}
		for _, name := range []string{"ostree", "bootc", "rauc", "swupdate", "mender", "packages", "script"} {
			configured[name] = registry.Unavailable{BackendName: name, Err: err}
		}
	}
	for name, b := range configured {
		out[name] = b
	}
	return out
}

// backendNames lists the names of backends, sorted.
func backendNames(bs map[string]backend.Backend) []string {
	names := make([]string, 0, len(bs))
	for n := range bs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookupBackend adapts a backend map to executor.Backends.
func lookupBackend(bs map[string]backend.Backend) func(string) (backend.Backend, error) {
	return func(name string) (backend.Backend, error) {
		b, ok := bs[name]
		if !ok {
			return nil, fmt.Errorf("unknown OS backend %q (have %v)", name, backendNames(bs))
		}
		return b, nil
	}
}
