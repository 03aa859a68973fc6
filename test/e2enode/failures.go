//go:build e2enode

package e2enode

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// failed keeps every failed assertion of the run; TestMain repeats them at the
// end of the output.
var failed = &lanekit.Failures{Lane: "e2enode", Dir: "/test/e2enode/"}

// newG is NewWithT(t) whose failures are also kept for the run's summary.
func newG(t *testing.T) *WithT { return failed.G(t) }
