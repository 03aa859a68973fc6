package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/extension"
)

// HandlerPath runs one hook call through the handler path the hook server runs for
// it, without HTTP and TLS: decode the request body, call the handler, encode the
// answer. It fails when the answer is not Success.
func HandlerPath(ctx context.Context, h *extension.Handlers, c Call) error {
	var resp runtimehooksv1.ResponseObject
	switch c.Hook {
	case "CanUpdateMachineSet":
		req, r := &runtimehooksv1.CanUpdateMachineSetRequest{}, &runtimehooksv1.CanUpdateMachineSetResponse{}
		if err := json.Unmarshal(c.Body, req); err != nil {
			return err
		}
		h.DoCanUpdateMachineSet(ctx, req, r)
		resp = r
	case "CanUpdateMachine":
		req, r := &runtimehooksv1.CanUpdateMachineRequest{}, &runtimehooksv1.CanUpdateMachineResponse{}
		if err := json.Unmarshal(c.Body, req); err != nil {
			return err
		}
		h.DoCanUpdateMachine(ctx, req, r)
		resp = r
	case "UpdateMachine":
		req, r := &runtimehooksv1.UpdateMachineRequest{}, &runtimehooksv1.UpdateMachineResponse{}
		if err := json.Unmarshal(c.Body, req); err != nil {
			return err
		}
		h.DoUpdateMachine(ctx, req, r)
		resp = r
	default:
		return fmt.Errorf("no handler path for hook %q", c.Hook)
	}
	if _, err := json.Marshal(resp); err != nil {
		return err
	}
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
		return fmt.Errorf("%s answered %s: %s", c.Hook, resp.GetStatus(), resp.GetMessage())
	}
	return nil
}

// BenchmarkHandler is the Go benchmark of HandlerPath over calls (round robin),
// reporting allocations (-benchmem).
func BenchmarkHandler(b *testing.B, h *extension.Handlers, calls []Call) {
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := HandlerPath(ctx, h, calls[i%len(calls)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
