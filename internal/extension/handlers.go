package extension

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// MachineUpdater performs an in-place update: the coordinator. It must be
// idempotent (CAPI calls it again until it answers done, and may call it after that)
// and must never answer done for work not done. It answers the coordinator's typed
// Outcome, which the handler writes into the response.
type MachineUpdater interface {
	Update(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) coordinator.Outcome
}

// Hook names, as CAPI's catalog names them; used in logs, metrics and messages.
const (
	hookCanUpdateMachine    = "CanUpdateMachine"
	hookCanUpdateMachineSet = "CanUpdateMachineSet"
	hookUpdateMachine       = "UpdateMachine"
)

// MessageNoCoordinator is UpdateMachine's Failure message when no coordinator is
// configured.
const MessageNoCoordinator = "in-place updates need the coordinator; none is configured"

// Options configure Handlers.
type Options struct {
	// Policy is the operator's policy; required.
	Policy *policy.Policy
	// Updater performs UpdateMachine; nil makes UpdateMachine answer Failure.
	Updater MachineUpdater
	// Metrics records calls and decisions; required.
	Metrics *Metrics
	// UpgradePlans reads what GenerateUpgradePlan needs from the management
	// cluster; nil makes GenerateUpgradePlan answer Failure.
	UpgradePlans UpgradePlanReader
	// Secrets reads management Secrets (the coordinator's SecretCache, as
	// UpdateMachine reads them), so that the CanUpdate hooks refuse a
	// configuration whose referenced Secrets are over UpdateMachine's budget
	// (secretbudget); nil skips that check.
	Secrets client.Reader
}

// Handlers answer the runtime hooks.
type Handlers struct {
	planner  *planner.Planner
	updater  MachineUpdater
	metrics  *Metrics
	upgrades UpgradePlanReader
	secrets  client.Reader
}

// NewHandlers validates opts and returns the handlers.
func NewHandlers(opts Options) (*Handlers, error) {
	if opts.Metrics == nil {
		return nil, errors.New("extension handlers need metrics")
	}
	p, err := planner.New(opts.Policy)
	if err != nil {
		return nil, fmt.Errorf("extension handlers: %w", err)
	}
	return &Handlers{planner: p, updater: opts.Updater, metrics: opts.Metrics, upgrades: opts.UpgradePlans, secrets: opts.Secrets}, nil
}

// DoCanUpdateMachine answers CanUpdateMachine (KubeadmControlPlane machines).
func (h *Handlers) DoCanUpdateMachine(ctx context.Context, req *runtimehooksv1.CanUpdateMachineRequest, resp *runtimehooksv1.CanUpdateMachineResponse) {
	start := time.Now()
	log := ctrl.LoggerFrom(ctx).WithValues("hook", hookCanUpdateMachine, "Machine", klog.KRef(req.Desired.Machine.Namespace, req.Desired.Machine.Name))
	defer h.finish(ctx, hookCanUpdateMachine, start, resp, func() { *resp = runtimehooksv1.CanUpdateMachineResponse{} })

	res, des, err := computeCanUpdateMachine(h.planner, req)
	if err == nil {
		err = h.secretBudget(ctx, des, []string{"spec"}, res)
	}
	if err != nil {
		fail(resp, err)
		return
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.MachinePatch = jsonPatch(res.MachinePatch)
	resp.InfrastructureMachinePatch = jsonPatch(res.InfrastructurePatch)
	resp.BootstrapConfigPatch = jsonPatch(res.BootstrapPatch)
	h.report(log, hookCanUpdateMachine, res)
}

// DoCanUpdateMachineSet answers CanUpdateMachineSet (MachineDeployments).
func (h *Handlers) DoCanUpdateMachineSet(ctx context.Context, req *runtimehooksv1.CanUpdateMachineSetRequest, resp *runtimehooksv1.CanUpdateMachineSetResponse) {
	start := time.Now()
	log := ctrl.LoggerFrom(ctx).WithValues("hook", hookCanUpdateMachineSet, "MachineSet", klog.KRef(req.Desired.MachineSet.Namespace, req.Desired.MachineSet.Name))
	defer h.finish(ctx, hookCanUpdateMachineSet, start, resp, func() { *resp = runtimehooksv1.CanUpdateMachineSetResponse{} })

	res, des, err := computeCanUpdateMachineSet(h.planner, req)
	if err == nil {
		err = h.secretBudget(ctx, des, []string{"spec", "template", "spec"}, res)
	}
	if err != nil {
		fail(resp, err)
		return
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	resp.MachineSetPatch = jsonPatch(res.MachinePatch)
	resp.InfrastructureMachineTemplatePatch = jsonPatch(res.InfrastructurePatch)
	resp.BootstrapConfigTemplatePatch = jsonPatch(res.BootstrapPatch)
	h.report(log, hookCanUpdateMachineSet, res)
}

// DoUpdateMachine answers UpdateMachine by delegating to the coordinator.
func (h *Handlers) DoUpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	start := time.Now()
	defer h.finish(ctx, hookUpdateMachine, start, resp, func() { *resp = runtimehooksv1.UpdateMachineResponse{} })

	if err := checkRequestKind(req.Kind, req.APIVersion, "UpdateMachineRequest"); err != nil {
		fail(resp, fmt.Errorf("%s: %w", hookUpdateMachine, err))
		return
	}
	if h.updater == nil {
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(MessageNoCoordinator)
		return
	}
	out := h.updater.Update(ctx, req)
	if !out.Kind.Known() {
		// An outcome of no known kind is neither done nor failed; never let it
		// pass as Success.
		fail(resp, fmt.Errorf("the coordinator returned no outcome (kind %q)", out.Kind))
		return
	}
	out.WriteResponse(resp)
}

// finish recovers a panic into a Failure response (reset clears anything half
// written, such as patches), then records metrics.
func (h *Handlers) finish(ctx context.Context, hook string, start time.Time, resp runtimehooksv1.ResponseObject, reset func()) {
	if r := recover(); r != nil {
		reset()
		resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
		resp.SetMessage(fmt.Sprintf("%s: internal error: %v", hook, r))
		ctrl.LoggerFrom(ctx).Error(fmt.Errorf("panic: %v", r), "Hook handler panicked", "hook", hook, "stack", string(debug.Stack()))
	}
	if resp.GetStatus() == runtimehooksv1.ResponseStatusFailure {
		ctrl.LoggerFrom(ctx).Info("Hook call failed", "hook", hook, "message", resp.GetMessage())
	}
	h.metrics.calls.WithLabelValues(hook, string(resp.GetStatus())).Inc()
	h.metrics.duration.WithLabelValues(hook, string(resp.GetStatus())).Observe(time.Since(start).Seconds())
}

// report logs and counts a planner result.
func (h *Handlers) report(log logr.Logger, hook string, res *planner.Result) {
	refused := res.Refused()
	for _, d := range res.Decisions {
		h.metrics.decisions.WithLabelValues(hook, d.Object, strconv.FormatBool(d.Covered)).Inc()
	}
	for _, d := range refused {
		log.Info("Change cannot be applied in place", "object", d.Object, "field", d.Field, "reason", d.Reason)
	}
	log.Info("Answered in-place update check", "inPlace", len(refused) == 0,
		"covered", len(res.Decisions)-len(refused), "refused", len(refused))
}

func fail(resp runtimehooksv1.ResponseObject, err error) {
	resp.SetStatus(runtimehooksv1.ResponseStatusFailure)
	resp.SetMessage(err.Error())
}

func jsonPatch(p []byte) runtimehooksv1.Patch {
	if p == nil {
		return runtimehooksv1.Patch{}
	}
	return runtimehooksv1.Patch{PatchType: runtimehooksv1.JSONPatchType, Patch: p}
}

// computeCanUpdateMachine decodes a CanUpdateMachine request and plans it; it
// returns the desired objects too.
func computeCanUpdateMachine(p *planner.Planner, req *runtimehooksv1.CanUpdateMachineRequest) (*planner.Result, planner.Objects, error) {
	if err := checkRequestKind(req.Kind, req.APIVersion, "CanUpdateMachineRequest"); err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachine, err)
	}
	cur, err := decodeSide("current", "machine", &req.Current.Machine, "infrastructureMachine", req.Current.InfrastructureMachine, "bootstrapConfig", req.Current.BootstrapConfig)
	if err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachine, err)
	}
	des, err := decodeSide("desired", "machine", &req.Desired.Machine, "infrastructureMachine", req.Desired.InfrastructureMachine, "bootstrapConfig", req.Desired.BootstrapConfig)
	if err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachine, err)
	}
	res, err := p.CanUpdateMachine(req.GetSettings(), cur, des)
	return res, des, err
}

// computeCanUpdateMachineSet decodes a CanUpdateMachineSet request and plans
// it; it returns the desired objects too.
func computeCanUpdateMachineSet(p *planner.Planner, req *runtimehooksv1.CanUpdateMachineSetRequest) (*planner.Result, planner.Objects, error) {
	if err := checkRequestKind(req.Kind, req.APIVersion, "CanUpdateMachineSetRequest"); err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachineSet, err)
	}
	cur, err := decodeSide("current", "machineSet", &req.Current.MachineSet, "infrastructureMachineTemplate", req.Current.InfrastructureMachineTemplate, "bootstrapConfigTemplate", req.Current.BootstrapConfigTemplate)
	if err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachineSet, err)
	}
	des, err := decodeSide("desired", "machineSet", &req.Desired.MachineSet, "infrastructureMachineTemplate", req.Desired.InfrastructureMachineTemplate, "bootstrapConfigTemplate", req.Desired.BootstrapConfigTemplate)
	if err != nil {
		return nil, planner.Objects{}, fmt.Errorf("%s: %w", hookCanUpdateMachineSet, err)
	}
	res, err := p.CanUpdateMachineSet(req.GetSettings(), cur, des)
	return res, des, err
}

// secretBudget fails the call when the desired bootstrap configuration (its
// KubeadmConfigSpec at specPath) references Secrets over UpdateMachine's budget
// (secretbudget, the rule the guard admitted the write by). It fails rather than
// answer "cannot update in place": Cluster API replaces Machines it may not update
// in place, and the guard, which refuses such a write at the API, can only have
// admitted it because a Secret was created or grew afterwards. A failed call
// stops the rollout until the Secrets fit (Cluster API calls again), before
// anything reached a node. Secrets are read only for a plan that is in place
// otherwise; an error reading them fails the call too.
func (h *Handlers) secretBudget(ctx context.Context, des planner.Objects, specPath []string, res *planner.Result) error {
	if h.secrets == nil || des.Bootstrap == nil || len(res.Decisions) == 0 || !res.FullyCovered() {
		return nil
	}
	spec, err := secretbudget.SpecAt(des.Bootstrap, specPath...)
	if err != nil {
		return fmt.Errorf("%w: desired %w", planner.ErrMalformed, err)
	}
	sizes := secretbudget.Sizes{}
	if err := sizes.Read(ctx, h.secrets, des.Machine.GetNamespace(), spec); err != nil {
		return err
	}
	over, _, err := sizes.Check(spec)
	if err != nil {
		return err
	}
	if over != nil {
		return fmt.Errorf("in-place update waits until the referenced Secrets fit: %w", over)
	}
	return nil
}

// checkRequestKind refuses a request sent to the wrong hook. CAPI's runtime client
// always sets the request's apiVersion and kind.
func checkRequestKind(kind, apiVersion, want string) error {
	wantAPIVersion := runtimehooksv1.GroupVersion.String()
	if kind != want || apiVersion != wantAPIVersion {
		return fmt.Errorf("%w: request has apiVersion %q kind %q, expected %s %s", planner.ErrMalformed, apiVersion, kind, wantAPIVersion, want)
	}
	return nil
}

// decodeSide turns one side of a request into JSON objects, exactly as they
// travelled: the typed Machine(Set) (a pointer) is converted field by field as its
// JSON encoding reads (apimachinery's converter honours the json tags, omitempty
// and omitzero, and the types' own MarshalJSON), so patch paths match CAPI's own
// copy.
func decodeSide(side, machineSlot string, machine any, infraSlot string, infra runtime.RawExtension, bootstrapSlot string, bootstrap runtime.RawExtension) (planner.Objects, error) {
	var out planner.Objects
	var err error
	if out.Machine, err = toUnstructured(machine); err != nil {
		return out, fmt.Errorf("%w: %s.%s: %w", planner.ErrMalformed, side, machineSlot, err)
	}
	if out.Infrastructure, err = rawToUnstructured(infra); err != nil {
		return out, fmt.Errorf("%w: %s.%s: %w", planner.ErrMalformed, side, infraSlot, err)
	}
	if out.Bootstrap, err = rawToUnstructured(bootstrap); err != nil {
		return out, fmt.Errorf("%w: %s.%s: %w", planner.ErrMalformed, side, bootstrapSlot, err)
	}
	return out, nil
}

// toUnstructured converts a typed object (a pointer) without the JSON round trip
// (encode, then decode into maps), which cost a third of a CanUpdate call's
// allocations.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// rawToUnstructured decodes an embedded object; an absent one is nil.
func rawToUnstructured(raw runtime.RawExtension) (*unstructured.Unstructured, error) {
	data := raw.Raw
	if len(data) == 0 && raw.Object != nil {
		var err error
		if data, err = json.Marshal(raw.Object); err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
	}
	if len(data) == 0 || string(data) == "null" {
		return nil, nil
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}
