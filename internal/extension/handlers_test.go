package extension

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
	"github.com/capi-inplace/capi-inplace/internal/policy"
)

func newTestHandlers(t *testing.T, updater MachineUpdater) (*Handlers, *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHandlers(Options{Policy: policy.Builtin(), Updater: updater, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}

func raw(obj any) runtime.RawExtension {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return runtime.RawExtension{Raw: b}
}

// msRequest returns a CanUpdateMachineSet request for a version change plus a
// files change, with the apiVersion and kind CAPI sets.
func msRequest(fromVersion, toVersion string) *runtimehooksv1.CanUpdateMachineSetRequest {
	desSpec := pt.KubeadmConfigSpec()
	desSpec.Files = append(desSpec.Files, bootstrapv1.File{Path: "/etc/edge/site.conf", Content: "site=42\n"})
	if toVersion >= "v1.36" {
		desSpec.ClusterConfiguration.FeatureGates = nil
	}
	req := &runtimehooksv1.CanUpdateMachineSetRequest{
		Current: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet:                    *pt.MachineSet("md-0-a", fromVersion, "infra-a", "boot-a"),
			InfrastructureMachineTemplate: raw(pt.DevMachineTemplate("infra-a", pt.DevMachineSpec("")).Object),
			BootstrapConfigTemplate:       raw(pt.KubeadmConfigTemplate("boot-a", pt.KubeadmConfigSpec())),
		},
		Desired: runtimehooksv1.CanUpdateMachineSetRequestObjects{
			MachineSet:                    *pt.MachineSet("md-0-b", toVersion, "infra-b", "boot-b"),
			InfrastructureMachineTemplate: raw(pt.DevMachineTemplate("infra-b", pt.DevMachineSpec("")).Object),
			BootstrapConfigTemplate:       raw(pt.KubeadmConfigTemplate("boot-b", desSpec)),
		},
	}
	req.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineSetRequest"))
	return req
}

func TestDoCanUpdateMachineSet(t *testing.T) {
	tests := []struct {
		name        string
		req         func() *runtimehooksv1.CanUpdateMachineSetRequest
		wantStatus  runtimehooksv1.ResponseStatus
		wantMessage string
		wantPatches bool
	}{
		{name: "covered upgrade", req: func() *runtimehooksv1.CanUpdateMachineSetRequest { return msRequest("v1.35.2", "v1.36.1") },
			wantStatus: runtimehooksv1.ResponseStatusSuccess, wantPatches: true},
		{name: "request of another hook", req: func() *runtimehooksv1.CanUpdateMachineSetRequest {
			r := msRequest("v1.35.2", "v1.36.1")
			r.Kind = "CanUpdateMachineRequest"
			return r
		}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: `request has apiVersion "hooks.runtime.cluster.x-k8s.io/v1alpha1" kind "CanUpdateMachineRequest", expected hooks.runtime.cluster.x-k8s.io/v1alpha1 CanUpdateMachineSetRequest`},
		{name: "request without kind", req: func() *runtimehooksv1.CanUpdateMachineSetRequest {
			r := msRequest("v1.35.2", "v1.36.1")
			r.Kind, r.APIVersion = "", ""
			return r
		}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: `kind ""`},
		{name: "bootstrap template that is not an object", req: func() *runtimehooksv1.CanUpdateMachineSetRequest {
			r := msRequest("v1.35.2", "v1.36.1")
			r.Desired.BootstrapConfigTemplate = runtime.RawExtension{Raw: []byte(`["a"]`)}
			return r
		}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "desired.bootstrapConfigTemplate: not a JSON object"},
		{name: "missing infrastructure template", req: func() *runtimehooksv1.CanUpdateMachineSetRequest {
			r := msRequest("v1.35.2", "v1.36.1")
			r.Current.InfrastructureMachineTemplate = runtime.RawExtension{}
			return r
		}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "current.infrastructureMachineTemplate is missing"},
		{name: "machine in the machineSet slot", req: func() *runtimehooksv1.CanUpdateMachineSetRequest {
			r := msRequest("v1.35.2", "v1.36.1")
			r.Desired.MachineSet.Kind = "Machine"
			return r
		}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: `desired.machineSet has apiVersion "cluster.x-k8s.io/v1beta2" kind "Machine"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			h, m := newTestHandlers(t, nil)
			resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
			h.DoCanUpdateMachineSet(context.Background(), tt.req(), resp)
			g.Expect(resp.GetStatus()).To(Equal(tt.wantStatus), resp.GetMessage())
			g.Expect(resp.GetMessage()).To(ContainSubstring(tt.wantMessage))
			g.Expect(resp.MachineSetPatch.IsDefined()).To(Equal(tt.wantPatches))
			g.Expect(resp.BootstrapConfigTemplatePatch.IsDefined()).To(Equal(tt.wantPatches))
			if tt.wantPatches {
				g.Expect(resp.MachineSetPatch.PatchType).To(Equal(runtimehooksv1.JSONPatchType))
			}
			g.Expect(counterValue(t, m.calls.WithLabelValues(hookCanUpdateMachineSet, string(tt.wantStatus)))).To(Equal(1.0))
		})
	}
}

func TestDecisionsAreCounted(t *testing.T) {
	g := NewWithT(t)
	h, m := newTestHandlers(t, nil)
	resp := &runtimehooksv1.CanUpdateMachineSetResponse{}
	h.DoCanUpdateMachineSet(context.Background(), msRequest("v1.35.2", "v1.37.0"), resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess))
	g.Expect(resp.MachineSetPatch.IsDefined()).To(BeFalse(), "a skipped minor gets no version patch")
	g.Expect(counterValue(t, m.decisions.WithLabelValues(hookCanUpdateMachineSet, "MachineSet", "false"))).To(Equal(1.0))
	// files covered; the feature gate refused because the version change is refused.
	g.Expect(counterValue(t, m.decisions.WithLabelValues(hookCanUpdateMachineSet, "KubeadmConfigTemplate", "true"))).To(Equal(1.0))
	g.Expect(counterValue(t, m.decisions.WithLabelValues(hookCanUpdateMachineSet, "KubeadmConfigTemplate", "false"))).To(Equal(1.0))
}

func TestDoCanUpdateMachine(t *testing.T) {
	g := NewWithT(t)
	h, _ := newTestHandlers(t, nil)
	spec := pt.KubeadmConfigSpec()
	desSpec := pt.KubeadmConfigSpec()
	desSpec.ClusterConfiguration.FeatureGates = nil
	req := &runtimehooksv1.CanUpdateMachineRequest{
		Current: runtimehooksv1.CanUpdateMachineRequestObjects{
			Machine:               *pt.Machine("cp-1", "v1.35.4"),
			InfrastructureMachine: raw(pt.DevMachine("cp-1", pt.DevMachineSpec("")).Object),
			BootstrapConfig:       raw(pt.KubeadmConfig("cp-1", spec)),
		},
		Desired: runtimehooksv1.CanUpdateMachineRequestObjects{
			Machine:               *pt.Machine("cp-1", "v1.36.0"),
			InfrastructureMachine: raw(pt.DevMachine("cp-1", pt.DevMachineSpec("")).Object),
			BootstrapConfig:       raw(pt.KubeadmConfig("cp-1", desSpec)),
		},
	}
	req.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("CanUpdateMachineRequest"))
	resp := &runtimehooksv1.CanUpdateMachineResponse{}
	h.DoCanUpdateMachine(context.Background(), req, resp)
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusSuccess), resp.GetMessage())
	g.Expect(string(resp.MachinePatch.Patch)).To(Equal(`[{"op":"replace","path":"/spec/version","value":"v1.36.0"}]`))
	g.Expect(string(resp.BootstrapConfigPatch.Patch)).To(Equal(`[{"op":"remove","path":"/spec/clusterConfiguration/featureGates"}]`))
	g.Expect(resp.InfrastructureMachinePatch.IsDefined()).To(BeFalse())
}

func TestPanicBecomesFailure(t *testing.T) {
	g := NewWithT(t)
	m, err := NewMetrics(prometheus.NewRegistry())
	g.Expect(err).NotTo(HaveOccurred())
	// A Handlers without a planner panics inside the planner call: the handler
	// must still answer, with Failure and no patches.
	h := &Handlers{metrics: m}
	resp := &runtimehooksv1.CanUpdateMachineSetResponse{MachineSetPatch: runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: []byte("[]")}}
	g.Expect(func() { h.DoCanUpdateMachineSet(context.Background(), msRequest("v1.35.2", "v1.35.3"), resp) }).NotTo(Panic())
	g.Expect(resp.GetStatus()).To(Equal(runtimehooksv1.ResponseStatusFailure))
	g.Expect(resp.GetMessage()).To(HavePrefix("CanUpdateMachineSet: internal error:"))
	g.Expect(resp.MachineSetPatch.IsDefined()).To(BeFalse())
}

type fakeUpdater struct {
	calls int
	do    func() coordinator.Outcome
}

func (f *fakeUpdater) Update(context.Context, *runtimehooksv1.UpdateMachineRequest) coordinator.Outcome {
	f.calls++
	return f.do()
}

func TestDoUpdateMachine(t *testing.T) {
	okReq := func() *runtimehooksv1.UpdateMachineRequest {
		r := &runtimehooksv1.UpdateMachineRequest{}
		r.SetGroupVersionKind(runtimehooksv1.GroupVersion.WithKind("UpdateMachineRequest"))
		return r
	}
	tests := []struct {
		name        string
		updater     *fakeUpdater
		req         *runtimehooksv1.UpdateMachineRequest
		wantStatus  runtimehooksv1.ResponseStatus
		wantMessage string
		wantRetry   int32
		wantCalls   int
	}{
		{name: "no coordinator", req: okReq(), wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: MessageNoCoordinator},
		{name: "delegated, in progress", req: okReq(), updater: &fakeUpdater{do: func() coordinator.Outcome {
			return coordinator.Outcome{Kind: coordinator.OutcomeInProgress, RetryAfterSeconds: 10, Message: "draining"}
		}}, wantStatus: runtimehooksv1.ResponseStatusSuccess, wantMessage: "draining", wantRetry: 10, wantCalls: 1},
		{name: "done", req: okReq(), updater: &fakeUpdater{do: func() coordinator.Outcome {
			return coordinator.Outcome{Kind: coordinator.OutcomeDone, Message: "node runs plan"}
		}}, wantStatus: runtimehooksv1.ResponseStatusSuccess, wantMessage: "node runs plan", wantCalls: 1},
		{name: "final failure has no retry on the wire", req: okReq(), updater: &fakeUpdater{do: func() coordinator.Outcome {
			return coordinator.Outcome{Kind: coordinator.OutcomeFailedFinal, Cause: coordinator.CauseRolledBack, RetryAfterSeconds: 7, Message: "rolled back"}
		}}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "rolled back", wantCalls: 1},
		{name: "coordinator answers no outcome", req: okReq(), updater: &fakeUpdater{do: func() coordinator.Outcome { return coordinator.Outcome{RetryAfterSeconds: 3} }},
			wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "the coordinator returned no outcome", wantCalls: 1},
		{name: "coordinator panics", req: okReq(), updater: &fakeUpdater{do: func() coordinator.Outcome {
			panic("boom")
		}}, wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "UpdateMachine: internal error: boom", wantCalls: 1},
		{name: "wrong request kind", req: &runtimehooksv1.UpdateMachineRequest{}, updater: &fakeUpdater{},
			wantStatus: runtimehooksv1.ResponseStatusFailure, wantMessage: "expected hooks.runtime.cluster.x-k8s.io/v1alpha1 UpdateMachineRequest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var updater MachineUpdater
			if tt.updater != nil {
				updater = tt.updater
			}
			h, _ := newTestHandlers(t, updater)
			resp := &runtimehooksv1.UpdateMachineResponse{}
			h.DoUpdateMachine(context.Background(), tt.req, resp)
			g.Expect(resp.GetStatus()).To(Equal(tt.wantStatus))
			g.Expect(resp.GetMessage()).To(ContainSubstring(tt.wantMessage))
			g.Expect(resp.GetRetryAfterSeconds()).To(Equal(tt.wantRetry))
			if tt.updater != nil {
				g.Expect(tt.updater.calls).To(Equal(tt.wantCalls))
			}
		})
	}
}

func TestNewHandlersValidates(t *testing.T) {
	g := NewWithT(t)
	m, err := NewMetrics(prometheus.NewRegistry())
	g.Expect(err).NotTo(HaveOccurred())
	_, err = NewHandlers(Options{Metrics: m})
	g.Expect(err).To(MatchError(ContainSubstring("policy")))
	_, err = NewHandlers(Options{Policy: policy.Builtin()})
	g.Expect(err).To(MatchError(ContainSubstring("metrics")))
}

func TestMetricsRegisterTwice(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	a, err := NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred())
	b, err := NewMetrics(reg)
	g.Expect(err).NotTo(HaveOccurred())
	a.calls.WithLabelValues("x", "Success").Inc()
	g.Expect(counterValue(t, b.calls.WithLabelValues("x", "Success"))).To(Equal(1.0))
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}

// TestToUnstructuredIsTheJSONEncoding: the handlers convert the typed Machine(Set)
// with apimachinery's converter instead of encoding and decoding JSON; the objects
// the planner sees must be the same, for objects with every kind of field CAPI
// sets (times, quantities of omitzero structs, lists, maps, pointers).
func TestToUnstructuredIsTheJSONEncoding(t *testing.T) {
	machine := `{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"Machine","metadata":{"name":"m","namespace":"ns",
	"creationTimestamp":"2026-11-30T10:00:00Z","labels":{"a":"b"},"annotations":{"x":"y"},"finalizers":["f"],
	"ownerReferences":[{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachineSet","name":"ms","uid":"u","controller":true}]},
	"spec":{"clusterName":"c","version":"v1.30.1","failureDomain":"fd-1","minReadySeconds":0,"providerID":"dev://m",
	"bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"KubeadmConfig","name":"k"},"dataSecretName":"s"},
	"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"DevMachine","name":"d"},
	"readinessGates":[{"conditionType":"Ready"}],"deletion":{"nodeDrainTimeoutSeconds":30,"nodeDeletionTimeoutSeconds":0},
	"taints":[{"key":"k","value":"v","effect":"NoSchedule","propagation":"Always"}]},
	"status":{"phase":"Running","nodeRef":{"name":"n"},"lastUpdated":"2026-11-30T10:01:00Z",
	"conditions":[{"type":"Ready","status":"True","reason":"R","lastTransitionTime":"2026-11-30T10:00:00Z","observedGeneration":3}],
	"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"observedGeneration":3}}`
	machineSet := `{"apiVersion":"cluster.x-k8s.io/v1beta2","kind":"MachineSet","metadata":{"name":"ms","namespace":"ns"},
	"spec":{"clusterName":"c","replicas":3,"selector":{"matchLabels":{"a":"b"}},
	"template":{"metadata":{"labels":{"a":"b"}},"spec":{"clusterName":"c","version":"v1.30.1",
	"bootstrap":{"configRef":{"apiGroup":"bootstrap.cluster.x-k8s.io","kind":"KubeadmConfigTemplate","name":"k"}},
	"infrastructureRef":{"apiGroup":"infrastructure.cluster.x-k8s.io","kind":"DevMachineTemplate","name":"d"},
	"deletion":{"nodeVolumeDetachTimeoutSeconds":10}}}},
	"status":{"replicas":3,"readyReplicas":2}}`
	for _, tt := range []struct {
		name string
		doc  string
		obj  any
	}{
		{"Machine", machine, nil},
		{"empty Machine", `{}`, nil},
		{"MachineSet", machineSet, nil},
		{"plannertest MachineSet", "", pt.MachineSet("ms", "v1.30.1", "infra", "boot")},
		{"plannertest Machine", "", pt.Machine("m", "v1.30.1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj
			switch tt.name {
			case "Machine", "empty Machine":
				m := &runtimehooksv1.CanUpdateMachineRequestObjects{}
				if err := json.Unmarshal([]byte(tt.doc), &m.Machine); err != nil {
					t.Fatal(err)
				}
				obj = &m.Machine
			case "MachineSet":
				m := &runtimehooksv1.CanUpdateMachineSetRequestObjects{}
				if err := json.Unmarshal([]byte(tt.doc), &m.MachineSet); err != nil {
					t.Fatal(err)
				}
				obj = &m.MachineSet
			}
			checkConverted(t, tt.name, obj)
		})
	}
}
