package bench

import (
	"testing"

	. "github.com/onsi/gomega"
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
// changes that our planner covers in full (patches for the Machine(Set) and the
// KubeadmConfig(Template)), so the benchmark measures the full answer, and the
// handler path accepts them.
func TestPayloadsAreCoveredInPlace(t *testing.T) {
	h := pureHandlers(t)
	t.Run("CanUpdateMachineSet", func(t *testing.T) {
		g := NewWithT(t)
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
		req := CanUpdateMachineSetRequest()
		req.Kind, req.APIVersion = "CanUpdateMachineSetRequest", runtimehooksv1.GroupVersion.String()
		h.DoCanUpdateMachineSet(t.Context(), req, resp)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
		g.Expect(resp.MachineSetPatch.IsDefined()).To(BeTrue())
		g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(BeTrue())
		g.Expect(HandlerPath(t.Context(), h, call(t, "CanUpdateMachineSet", CanUpdateMachineSetRequest()))).To(Succeed())
	})
	t.Run("CanUpdateMachine", func(t *testing.T) {
		g := NewWithT(t)
		resp := &runtimehooksv1.CanUpdateMachineResponse{}
		req := CanUpdateMachineRequest()
		req.Kind, req.APIVersion = "CanUpdateMachineRequest", runtimehooksv1.GroupVersion.String()
		h.DoCanUpdateMachine(t.Context(), req, resp)
		g.Expect(resp.Status).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.Message)
		g.Expect(resp.MachinePatch.IsDefined()).To(BeTrue())
		g.Expect(resp.BootstrapConfigPatch.IsDefined()).To(BeTrue())
		g.Expect(HandlerPath(t.Context(), h, call(t, "CanUpdateMachine", CanUpdateMachineRequest()))).To(Succeed())
	})
}

func BenchmarkHandlerCanUpdateMachineSet(b *testing.B) {
	BenchmarkHandler(b, pureHandlers(b), []Call{call(b, "CanUpdateMachineSet", CanUpdateMachineSetRequest())})
}

func BenchmarkHandlerCanUpdateMachine(b *testing.B) {
	BenchmarkHandler(b, pureHandlers(b), []Call{call(b, "CanUpdateMachine", CanUpdateMachineRequest())})
}
