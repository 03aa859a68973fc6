package etcdtest

import (
	"testing"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/helperbin/helperbintest"
)

// Helper returns the etcd helper binary (cmd/capi-inplace-etcd) that etcd.Local
// runs, built from this source tree once per test process (helperbintest.Build).
// It fails the test when the build fails.
func Helper(t testing.TB) string {
	t.Helper()
	return helperbintest.Build(t, etcd.HelperName)
}
