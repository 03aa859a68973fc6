package bench

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/extension"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// handlers without a coordinator: the CanUpdate hooks are pure.
func pureHandlers(tb testing.TB) *extension.Handlers {
	tb.Helper()
	m, err := extension.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	h, err := extension.NewHandlers(extension.Options{Policy: policy.Builtin(), Metrics: m})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func call(tb testing.TB, hook string, req runtime.Object) Call {
	tb.Helper()
	var c Call
	var err error
	switch hook {
	case "CanUpdateMachineSet":
		c, err = Encode(runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet, req)
	case "CanUpdateMachine":
		c, err = Encode(runtimehooksv1.CanUpdateMachine, extension.HandlerCanUpdateMachine, req)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestPayloadsAreCoveredInPlace: the benchmark's payloads are real in-place
// changes that our planner covers, so the benchmark measures the full answer.
func TestPayloadsAreCoveredInPlace(t *testing.T) {
	h := pureHandlers(t)
	for name, c := range map[string]Call{
		"CanUpdateMachineSet": call(t, "CanUpdateMachineSet", CanUpdateMachineSetRequest()),
		"CanUpdateMachine":    call(t, "CanUpdateMachine", CanUpdateMachineRequest()),
	} {
		t.Run(name, func(t *testing.T) {
			if err := HandlerPath(t.Context(), h, c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func BenchmarkHandlerCanUpdateMachineSet(b *testing.B) {
	BenchmarkHandler(b, pureHandlers(b), []Call{call(b, "CanUpdateMachineSet", CanUpdateMachineSetRequest())})
}

func BenchmarkHandlerCanUpdateMachine(b *testing.B) {
	BenchmarkHandler(b, pureHandlers(b), []Call{call(b, "CanUpdateMachine", CanUpdateMachineRequest())})
}
