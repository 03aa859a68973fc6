package extension

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

// The hook fuzz targets feed raw request bytes through what CAPI's runtime server
// does with them (json.Unmarshal into the hook's request type; bodies over
// DefaultMaxRequestBodyBytes never get that far), the handler, and the response
// encoding. Handlers recover panics into a Failure "internal error", so that
// message counts as a crash here. Seeds: testdata/fuzz/<FuzzName>, built from the
// handler tests' fixtures.

func fuzzHandlers(f *testing.F, updater MachineUpdater) *Handlers {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		f.Fatal(err)
	}
	h, err := NewHandlers(Options{Policy: policy.Builtin(), Updater: updater, Metrics: m})
	if err != nil {
		f.Fatal(err)
	}
	return h
}

// maxHandlerTime is how long one fuzzed call may take: real calls answer in
// milliseconds, and the runtime client gives up after 10 s.
const maxHandlerTime = 5 * time.Second

// withinDeadline runs call and fails the input if it does not return in time, so a
// hang becomes a finding with its input saved, like a crash.
func withinDeadline(t *testing.T, body []byte, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	select {
	case <-done:
	case <-time.After(maxHandlerTime):
		t.Fatalf("handler did not answer within %s for a body of %d bytes", maxHandlerTime, len(body))
	}
}

// checkAnswer fails on a recovered panic, an unset or unknown status, or a
// response that does not encode.
func checkAnswer(t *testing.T, resp runtimehooksv1.ResponseObject) {
	t.Helper()
	if strings.Contains(resp.GetMessage(), "internal error:") {
		t.Fatalf("handler panicked: %s", resp.GetMessage())
	}
	switch resp.GetStatus() {
	case runtimehooksv1.ResponseStatusSuccess, runtimehooksv1.ResponseStatusFailure:
	default:
		t.Fatalf("status %q", resp.GetStatus())
	}
	if _, err := json.Marshal(resp); err != nil {
		t.Fatalf("encode response: %v", err)
	}
}

// checkPatch fails unless a defined patch is a JSON patch that applies to target,
// the object CAPI applies it to.
func checkPatch(t *testing.T, name string, p runtimehooksv1.Patch, target []byte) {
	t.Helper()
	if !p.IsDefined() {
		return
	}
	if p.PatchType != runtimehooksv1.JSONPatchType {
		t.Fatalf("%s: patch type %q", name, p.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(p.Patch)
	if err != nil {
		t.Fatalf("%s: not a JSON patch: %v\n%s", name, err, p.Patch)
	}
	if _, err := patch.Apply(target); err != nil {
		t.Fatalf("%s: patch does not apply to the current object: %v\n%s\n%s", name, err, p.Patch, target)
	}
}

func rawOf(t *testing.T, obj any, raw runtime.RawExtension) []byte {
	t.Helper()
	if raw.Raw != nil {
		return raw.Raw
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

// checkConverted fails unless the converter the handlers use for the typed
// Machine(Set) gives the objects the JSON encoding gives (what CAPI sends, and
// what the handlers decoded before they used the converter).
func checkConverted(t *testing.T, name string, obj any) {
	t.Helper()
	got, err := toUnstructured(obj)
	if err != nil {
		t.Fatalf("%s: convert: %v", name, err)
	}
	want, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("%s: encode: %v", name, err)
	}
	// Compare as JSON text: the converter keeps integers as int64 where decoding
	// JSON gives float64; the encoded text is the same.
	gotJSON, err := json.Marshal(got.Object)
	if err != nil {
		t.Fatalf("%s: encode converted: %v", name, err)
	}
	var wantObj, gotObj map[string]any
	if err := json.Unmarshal(want, &wantObj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(gotJSON, &gotObj); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotObj, wantObj) {
		t.Fatalf("%s: converted object differs from its JSON encoding:\nconverted %s\nencoded   %s", name, gotJSON, want)
	}
}

func FuzzCanUpdateMachine(f *testing.F) {
	h := fuzzHandlers(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &runtimehooksv1.CanUpdateMachineRequest{}
		if err := json.Unmarshal(body, req); err != nil {
			return // CAPI's server answers Failure "error unmarshalling request"
		}
		checkConverted(t, "current.machine", &req.Current.Machine)
		checkConverted(t, "desired.machine", &req.Desired.Machine)
		resp := &runtimehooksv1.CanUpdateMachineResponse{}
		withinDeadline(t, body, func() { h.DoCanUpdateMachine(context.Background(), req, resp) })
		checkAnswer(t, resp)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
			return
		}
		checkPatch(t, "machinePatch", resp.MachinePatch, rawOf(t, req.Current.Machine, runtime.RawExtension{}))
		checkPatch(t, "infrastructureMachinePatch", resp.InfrastructureMachinePatch, req.Current.InfrastructureMachine.Raw)
		checkPatch(t, "bootstrapConfigPatch", resp.BootstrapConfigPatch, req.Current.BootstrapConfig.Raw)
	})
}

func FuzzCanUpdateMachineSet(f *testing.F) {
	h := fuzzHandlers(f, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &runtimehooksv1.CanUpdateMachineSetRequest{}
		if err := json.Unmarshal(body, req); err != nil {
			return
		}
		checkConverted(t, "current.machineSet", &req.Current.MachineSet)
		checkConverted(t, "desired.machineSet", &req.Desired.MachineSet)
		resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
		withinDeadline(t, body, func() { h.DoCanUpdateMachineSet(context.Background(), req, resp) })
		checkAnswer(t, resp)
		if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
			return
		}
		checkPatch(t, "machineSetPatch", resp.MachineSetPatch, rawOf(t, req.Current.MachineSet, runtime.RawExtension{}))
		checkPatch(t, "infrastructureMachineTemplatePatch", resp.InfrastructureMachineTemplatePatch, req.Current.InfrastructureMachineTemplate.Raw)
		checkPatch(t, "bootstrapConfigTemplatePatch", resp.BootstrapConfigTemplatePatch, req.Current.BootstrapConfigTemplate.Raw)
	})
}

// staticUpdater stands in for the coordinator: it answers in progress and records
// that it was called, so the target checks what reaches it.
type staticUpdater struct{ called bool }

func (s *staticUpdater) Update(_ context.Context, req *runtimehooksv1.UpdateMachineRequest) coordinator.Outcome {
	s.called = true
	// Touch what the coordinator reads from the request.
	_ = req.Desired.Machine.Name + req.Desired.Machine.Namespace + req.Desired.Machine.Spec.ClusterName
	return coordinator.Outcome{Kind: coordinator.OutcomeInProgress, RetryAfterSeconds: 5}
}

// FuzzUpdateMachine: UpdateMachine's own decoding and validation, with a static
// coordinator (the coordinator reads the cluster through a client; its decisions
// have their own tests). A request of the wrong kind never reaches the coordinator.
func FuzzUpdateMachine(f *testing.F) {
	u := &staticUpdater{}
	h := fuzzHandlers(f, u)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := &runtimehooksv1.UpdateMachineRequest{}
		if err := json.Unmarshal(body, req); err != nil {
			return
		}
		u.called = false
		resp := &runtimehooksv1.UpdateMachineResponse{}
		withinDeadline(t, body, func() { h.DoUpdateMachine(context.Background(), req, resp) })
		checkAnswer(t, resp)
		wrongKind := req.Kind != "UpdateMachineRequest" || req.APIVersion != runtimehooksv1.GroupVersion.String()
		if wrongKind && (u.called || resp.GetStatus() != runtimehooksv1.ResponseStatusFailure) {
			t.Fatalf("request %s %s reached the coordinator (status %s)", req.APIVersion, req.Kind, resp.GetStatus())
		}
	})
}
