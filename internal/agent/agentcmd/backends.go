package agentcmd

import (
	"context"
	"fmt"
	"maps"
	"sort"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/none"
	"github.com/capi-inplace/capi-inplace/internal/backend/registry"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// hostBackends returns the OS backends of a real node, by name: none, and the ones
// the node is configured with (registry.ConfigPath on the host). A misconfigured
// one is registered as registry.Unavailable, so a plan naming it fails with the
// configuration error. The backends' state directories stay pinned inside the
// host root until release, which the caller defers for as long as it uses them:
// a pinned directory is an open descriptor, closed (and its path gone) once
// nothing holds it.
func hostBackends(ctx context.Context, hostRoot string, runner backend.Runner) (backends map[string]backend.Backend, release func()) {
	host := &kube.Host{Root: hostRoot}
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	env := registry.Env{HostRoot: hostRoot, Runner: runner,
		PinDir: func(dir string) (string, error) {
			p, r, err := host.PinDir(dir, 0o700)
			if err == nil {
				releases = append(releases, r)
			}
			return p, err
		}}
	configured, err := registry.Load(ctx, env, host.ReadFile)
	if err != nil {
		configured = map[string]backend.Backend{}
		for _, name := range protocol.NodeBackends() {
			configured[name] = registry.Unavailable{BackendName: name, Err: err}
		}
	}
	return withNone(configured), release
}

// withNone adds the none backend (no OS image change) to bs.
func withNone(bs map[string]backend.Backend) map[string]backend.Backend {
	out := map[string]backend.Backend{none.Name: none.New()}
	maps.Copy(out, bs)
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
