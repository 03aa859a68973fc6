package registry

import (
	"context"
	"slices"
	"sort"
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// TestEveryConfigSectionIsInTheCatalog builds a configuration with every section
// set: the names the registry builds (working or Unavailable) are exactly
// protocol.NodeBackends, so a backend added here but not to the catalog (or the
// reverse) fails, and the policy, which accepts protocol.KnownBackends, cannot
// drift from what nodes can run.
func TestEveryConfigSectionIsInTheCatalog(t *testing.T) {
	cfg := Config{
		OSTree:   &OSTreeConfig{},
		Bootc:    &BootcConfig{},
		RAUC:     &RAUCConfig{},
		SWUpdate: &SWUpdateConfig{},
		Mender:   &MenderConfig{},
		Packages: &PackagesConfig{},
		Script:   &ScriptConfig{},
	}
	bs := Build(context.Background(), cfg, Env{HostRoot: t.TempDir(), Runner: &backendtest.Runner{}})
	var got []string
	for name, b := range bs {
		if b.Name() != name {
			t.Errorf("backend registered as %q names itself %q", name, b.Name())
		}
		got = append(got, name)
	}
	sort.Strings(got)
	want := protocol.NodeBackends()
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("registry builds %v, the catalog (protocol.NodeBackends) lists %v", got, want)
	}
	for _, n := range protocol.NodeBackends() {
		if !slices.Contains(protocol.KnownBackends(), n) {
			t.Errorf("KnownBackends lacks node backend %q", n)
		}
	}
}
