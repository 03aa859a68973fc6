package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/labels/format"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/extsettings"
	"github.com/capi-inplace/capi-inplace/internal/planner"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// WebhookPath is where Register serves the guard.
const WebhookPath = "/validate-cluster-x-k8s-io-inplace-guard"

// WebhookName is the name of the webhook inside its ValidatingWebhookConfiguration.
const WebhookName = "guard.inplace.capi-inplace.dev"

// ValidatingWebhook returns the guard's registration for a
// ValidatingWebhookConfiguration, pointing at clientConfig (a Service or URL whose
// path is WebhookPath). config/webhook registers it with a namespaceSelector on
// inplace.capi-inplace.dev/enabled=true, so it never sees other namespaces. Its
// infrastructure rule names the Docker and Dev providers' templates (what the e2e and
// bench stacks run); the Registrar replaces it with the templates installed.
//
// failurePolicy is Fail on purpose: an opted-in Cluster's writes must not reach Cluster
// API unguarded while the extension is down (fails closed). The rules cover UPDATE
// of the objects whose change rolls Machines out, and DELETE of MachineSets (a
// MachineDeployment replaces the Machines of a deleted MachineSet); an update that
// changes no spec never reaches it (MatchConditions).
func ValidatingWebhook(clientConfig admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.ValidatingWebhook {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	none := admissionregistrationv1.SideEffectClassNoneOnDryRun
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    WebhookName,
		ClientConfig:            clientConfig,
		Rules:                   Rules(defaultInfraTemplates),
		MatchConditions:         MatchConditions(),
		FailurePolicy:           &fail,
		MatchPolicy:             &equivalent,
		SideEffects:             &none,
		TimeoutSeconds:          ptr.To[int32](10),
		AdmissionReviewVersions: []string{"v1"},
	}
}

// Rules are the guard's rules, with one for the infrastructure machine templates of
// each version in infra: UPDATE of the objects whose change rolls Machines out, and
// DELETE of MachineSets (a MachineDeployment replaces the Machines of a deleted
// MachineSet).
func Rules(infra []InfraTemplate) []admissionregistrationv1.RuleWithOperations {
	update := []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	rule := func(ops []admissionregistrationv1.OperationType, group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.NamespacedScope),
		}}
	}
	rules := []admissionregistrationv1.RuleWithOperations{
		rule(update, clusterv1.GroupVersion.Group, clusterv1.GroupVersion.Version, "clusters", "machinedeployments"),
		rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete},
			clusterv1.GroupVersion.Group, clusterv1.GroupVersion.Version, "machinesets"),
		rule(update, controlplanev1.GroupVersion.Group, controlplanev1.GroupVersion.Version, "kubeadmcontrolplanes"),
		rule(update, bootstrapv1.GroupVersion.Group, bootstrapv1.GroupVersion.Version, "kubeadmconfigtemplates"),
	}
	var versions []string
	byVersion := map[string][]string{}
	for _, t := range infra {
		if _, ok := byVersion[t.Version]; !ok {
			versions = append(versions, t.Version)
		}
		byVersion[t.Version] = append(byVersion[t.Version], t.Resource)
	}
	for _, v := range versions {
		rules = append(rules, rule(update, InfraGroup, v, byVersion[v]...))
	}
	return rules
}

// MatchConditions send the guard only the writes it may refuse, so that the API
// server admits every other one without calling it, also while the extension is
// down (failurePolicy Fail refuses what it sends to an extension it cannot
// reach). Sent: a MachineSet's deletion, and an update that changes the spec
// (for a Cluster, spec.topology) of an object not being deleted, unless it is a
// MachineSet's (its Machines follow its MachineDeployment) or a Cluster's that
// turns or keeps the guard off. That is exactly what the handler would admit
// without reading anything: metadata-only writes (Cluster API's remediation and
// pause annotations, the guard=disabled and paused escape hatches, an override),
// a MachineDeployment scaling its MachineSets, finalizers removed at deletion.
func MatchConditions() []admissionregistrationv1.MatchCondition {
	guardOff := fmt.Sprintf("object.metadata.?annotations[?'%s'].orValue('') == '%s'", inplacev1.GuardAnnotation, inplacev1.GuardDisabled)
	return []admissionregistrationv1.MatchCondition{{
		Name: "may-replace-machines",
		Expression: "request.operation == 'DELETE' || (!has(object.metadata.deletionTimestamp) && request.kind.kind != 'MachineSet' && " +
			"(request.kind.kind == 'Cluster' ? !(" + guardOff + ") && object.spec.?topology != oldObject.spec.?topology : object.?spec != oldObject.?spec))",
	}}
}

// EventRecorder records the override Events; k8s.io/client-go/tools/events'
// EventRecorder (as returned by a controller-runtime manager) satisfies it.
type EventRecorder interface {
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

var _ EventRecorder = events.EventRecorder(nil)

// Options configure the guard.
type Options struct {
	// Reader reads the Cluster's objects, as preview.Gatherer does; its scheme must know
	// Cluster API's core, KCP and runtime (ExtensionConfig) v1beta2 types and
	// apiextensions v1 (for the served version of references). A cached reader keeps the guard well inside its latency
	// budget, provided it never waits for an informer's first list (cachedread.OrLive
	// reads live until then: under load the wait outlasted the API server's 10 s
	// timeout and the write failed closed). Required.
	Reader client.Reader
	// LiveReader, when set, reads without a cache: a refusal because an object was not
	// found is checked again through it before it stands, since a cache may not hold
	// yet the template that was created just before the write that references it (the
	// topology controller's rotation does exactly that).
	LiveReader client.Reader
	// Secrets reads the Secrets the written KubeadmConfigs reference, so that a
	// write whose Secrets are over the budget the CanUpdate hooks refuse by
	// (secretbudget) is refused here, before Cluster API would replace its Machines.
	// The extension passes its bounded Secret cache (never an informer of every
	// Secret). Required.
	Secrets client.Reader
	// Planner and Policy are the extension's own, so that the guard and the hooks
	// decide alike. Required.
	Planner *planner.Planner
	Policy  *policy.Policy
	// Settings are the ExtensionConfig settings the hooks are called with
	// (disableInPlaceUpdates), overlaid by those of the ExtensionConfig named.
	Settings map[string]string
	// ExtensionConfig, when set, names the ExtensionConfig that registers this
	// extension (the extension's --extension-config-name, as for the single-node
	// path): its spec.settings, read through Reader on every decision, are the
	// settings Cluster API calls the hooks with (disableInPlaceUpdates makes every
	// change a replacement). An ExtensionConfig that does not exist means no settings.
	ExtensionConfig string
	// Recorder records an Event on the object when an override lets a replacement
	// through. Required.
	Recorder EventRecorder
	// Metrics counts decisions; nil counts nothing.
	Metrics *Metrics
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// WebhookRegistry is the part of controller-runtime's webhook.Server we use.
type WebhookRegistry interface {
	Register(path string, hook http.Handler)
}

// Register serves the guard on registry at WebhookPath.
func Register(registry WebhookRegistry, opts Options) error {
	h, err := NewHandler(opts)
	if err != nil {
		return err
	}
	registry.Register(WebhookPath, &webhook.Admission{Handler: h})
	return nil
}

// Handler is the admission adapter around Decide.
type Handler struct {
	opts   Options
	mu     sync.Mutex
	memo   map[string]memoEntry
	events *overrideEvents
}

var _ admission.Handler = &Handler{}

// NewHandler checks opts and returns the admission handler.
func NewHandler(opts Options) (*Handler, error) {
	switch {
	case opts.Reader == nil:
		return nil, errors.New("guard: Options.Reader is required")
	case opts.Secrets == nil:
		return nil, errors.New("guard: Options.Secrets is required")
	case opts.Planner == nil || opts.Policy == nil:
		return nil, errors.New("guard: Options.Planner and Options.Policy are required")
	case opts.Recorder == nil:
		return nil, errors.New("guard: Options.Recorder is required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	events := &overrideEvents{reader: opts.Reader, recorder: opts.Recorder}
	if opts.LiveReader != nil {
		events.reader = opts.LiveReader
	}
	return &Handler{opts: opts, memo: map[string]memoEntry{}, events: events}, nil
}

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	kind := req.Kind.Kind
	resp, result, reasons := h.handle(ctx, req)
	h.opts.Metrics.record(kind, result, reasons, time.Since(start).Seconds())
	return resp
}

func (h *Handler) handle(ctx context.Context, req admission.Request) (admission.Response, string, []preview.CauseKind) {
	log := ctrl.LoggerFrom(ctx).WithValues("kind", req.Kind.Kind, "object", req.Namespace+"/"+req.Name)
	errored := func(code int32, err error) (admission.Response, string, []preview.CauseKind) {
		log.Error(err, "Guard refused a write it could not decide")
		return admission.Errored(code, fmt.Errorf("capi-inplace guard (fails closed for Clusters in namespaces labelled %s=true): %w", inplacev1.NamespaceEnabledLabel, err)), ResultError, nil
	}
	// The API server sends only opted-in namespaces (the namespaceSelector), but the
	// admission port is open to any pod: nothing of another namespace is read or
	// planned, so a direct request learns nothing about it.
	if enabled, err := h.namespaceEnabled(ctx, req.Namespace); err != nil {
		return errored(http.StatusServiceUnavailable, err)
	} else if !enabled {
		return admission.Allowed(""), ResultAllowed, nil
	}
	old := &unstructured.Unstructured{}
	if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decode the stored %s: %w", req.Kind.Kind, err))
	}
	if req.Operation == admissionv1.Delete {
		return h.machineSetDeletion(ctx, old, errored)
	}
	if req.Operation != admissionv1.Update {
		return admission.Allowed(""), ResultAllowed, nil
	}
	written := &unstructured.Unstructured{}
	if err := written.UnmarshalJSON(req.Object.Raw); err != nil {
		return errored(http.StatusBadRequest, fmt.Errorf("decode the written %s: %w", req.Kind.Kind, err))
	}
	if !specChanged(written.GetKind(), old, written) || written.GetDeletionTimestamp() != nil {
		return admission.Allowed(""), ResultAllowed, nil
	}
	if written.GetKind() == "MachineSet" {
		// A MachineSet creates new Machines from its template and never rolls the
		// existing ones out; a MachineDeployment's MachineSets follow the
		// MachineDeployment, which the guard judges at its own write.
		return admission.Allowed(""), ResultAllowed, nil
	}
	if staleOverride(old, written) {
		object := written.GetKind() + " " + written.GetNamespace() + "/" + written.GetName()
		return admission.Denied(staleOverrideMessage(object, old.GetAnnotations()[inplacev1.AllowReplaceAnnotation])), ResultRefused, []preview.CauseKind{CauseStaleOverride}
	}
	clusters, err := h.clustersOf(ctx, written)
	if err != nil {
		return errored(http.StatusServiceUnavailable, err)
	}
	settings, err := h.settings(ctx)
	if err != nil {
		return errored(http.StatusServiceUnavailable, err)
	}
	object := written.GetKind() + " " + written.GetNamespace() + "/" + written.GetName()
	result := ResultAllowed
	var warnings []string
	for _, cluster := range clusters {
		v, found, err := h.decide(ctx, h.opts.Reader, settings, object, cluster, old, written)
		if err == nil && found && missingObject(v) && h.opts.LiveReader != nil {
			v, found, err = h.decide(ctx, h.opts.LiveReader, settings, object, cluster, old, written)
		}
		switch {
		case errors.Is(err, preview.ErrInvalidChange):
			return errored(http.StatusForbidden, err)
		case err != nil:
			return errored(http.StatusServiceUnavailable, err)
		case !found:
			continue
		}
		warnings = append(warnings, v.Warnings...)
		switch {
		case v.Disabled:
			result = ResultDisabled
		case !v.Allowed:
			log.V(1).Info("Guard refused a write that replaces Machines", "cluster", cluster, "machines", v.Machines())
			return admission.Denied(v.Message(object, cluster)).WithWarnings(warnings...), ResultRefused, v.Kinds()
		case v.Override != "":
			result = ResultOverridden
			if !ptr.Deref(req.DryRun, false) {
				h.events.claim(overrideClaim{old: old, written: written, value: v.Override,
					note: fmt.Sprintf("%s=%q let a change by %s through that replaces Machine(s) %v of Cluster %s: %s",
						inplacev1.AllowReplaceAnnotation, v.Override, req.UserInfo.Username, v.Machines(), cluster, v.Refusals[0].Message)})
			}
			log.Info("Guard let a replacing write through on an override", "cluster", cluster, "override", v.Override, "user", req.UserInfo.Username, "machines", v.Machines())
		}
	}
	return admission.Allowed("").WithWarnings(warnings...), result, nil
}

// namespaceEnabled reads whether a namespace opted in to capi-inplace
// (inplacev1.NamespaceEnabled); one that does not exist did not.
func (h *Handler) namespaceEnabled(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return false, nil
	}
	ns := &corev1.Namespace{}
	if err := h.opts.Reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read namespace %s: %w", name, err)
	}
	return inplacev1.NamespaceEnabled(ns.Labels), nil
}

// fallbackWarning is the admission warning (kubectl prints it) for a topology write
// judged by its version alone.
func fallbackWarning(f *preview.TopologyFallbackError) string {
	return "capi-inplace guard: " + f.Error() + "; the KubeadmControlPlane, MachineDeployment and template writes the topology controller then makes are judged at their own write"
}

// decide reads one Cluster through reader and decides the write. found is false when
// the Cluster does not exist or is being deleted (nothing to guard).
func (h *Handler) decide(ctx context.Context, reader client.Reader, settings map[string]string, object, cluster string, old, written *unstructured.Unstructured) (Verdict, bool, error) {
	live, proposed, fallback, found, err := h.snapshots(ctx, reader, settings, written.GetNamespace(), cluster, old, written)
	if err != nil || !found || !live.Cluster.DeletionTimestamp.IsZero() {
		return Verdict{}, false, err
	}
	if fallback != nil {
		ctrl.LoggerFrom(ctx).Info("Guard judged a topology write by its version only", "cluster", live.Cluster.Namespace+"/"+live.Cluster.Name, "reason", fallback.Err.Error())
	}
	override := OverrideOf(old.GetAnnotations(), written.GetAnnotations())
	if override == "" && written.GetKind() != "Cluster" && derivedFromTopology(written) {
		override = clusterOverride(live.Cluster)
	}
	in := Input{
		Object: object, Live: live, Proposed: proposed, Planner: h.opts.Planner, Policy: h.opts.Policy,
		Settings: settings, Now: h.opts.Now(), Override: override,
	}
	if !disabled(live) {
		before, err := h.baseline(in)
		if err != nil {
			return Verdict{}, false, fmt.Errorf("%w: %w", errPlan, err)
		}
		in.Before = &before
	}
	v, err := Decide(in)
	if err != nil {
		return Verdict{}, false, fmt.Errorf("%w: %w", errPlan, err)
	}
	if fallback != nil && !v.Disabled {
		v.Warnings = append(v.Warnings, fallbackWarning(fallback))
	}
	return v, true, nil
}

// baseline returns the plan of the Cluster as it is, from the memo when the stored
// objects, the settings and the minute are those of an earlier decision: the same
// Cluster is written several times in a row (the topology controller writes its
// KubeadmControlPlane and MachineDeployments one after the other), and half of a
// decision's work is this plan.
func (h *Handler) baseline(in Input) (preview.Report, error) {
	key := in.Live.Cluster.Namespace + "/" + in.Live.Cluster.Name
	fp := fingerprint(in)
	h.mu.Lock()
	e, ok := h.memo[key]
	h.mu.Unlock()
	if ok && e.fingerprint == fp {
		return e.report, nil
	}
	r, err := Plan(in, in.Live)
	if err != nil {
		return preview.Report{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.memo) >= maxMemo {
		clear(h.memo)
	}
	h.memo[key] = memoEntry{fingerprint: fp, report: r}
	return r, nil
}

// maxMemo bounds the memo (one entry per Cluster).
const maxMemo = 1024

type memoEntry struct {
	fingerprint string
	report      preview.Report
}

// fingerprint identifies what the plan of the Cluster as it is depends on: every
// stored object's UID and resourceVersion, the sizes of the referenced Secrets, the
// settings, and the time to the minute (rollout.after deadlines).
func fingerprint(in Input) string {
	var b strings.Builder
	add := func(o metav1.Object) { b.WriteString(string(o.GetUID()) + "@" + o.GetResourceVersion() + ";") }
	add(in.Live.Cluster)
	if in.Live.ControlPlane != nil {
		add(in.Live.ControlPlane)
	}
	for i := range in.Live.MachineDeployments {
		add(&in.Live.MachineDeployments[i])
	}
	for i := range in.Live.MachineSets {
		add(&in.Live.MachineSets[i])
	}
	for i := range in.Live.Machines {
		add(&in.Live.Machines[i])
	}
	keys := make([]preview.ObjectKey, 0, len(in.Live.Objects))
	for k := range in.Live.Objects {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b preview.ObjectKey) int { return strings.Compare(a.Group+a.Kind+a.Name, b.Group+b.Kind+b.Name) })
	for _, k := range keys {
		b.WriteString(k.Group + "/" + k.Kind + "/")
		add(in.Live.Objects[k])
	}
	secrets := make([]string, 0, len(in.Live.SecretSizes))
	for name, size := range in.Live.SecretSizes {
		secrets = append(secrets, fmt.Sprintf("%s=%d", name, size))
	}
	slices.Sort(secrets)
	b.WriteString("secrets:" + strings.Join(secrets, ",") + ";")
	settings := make([]string, 0, len(in.Settings))
	for k, v := range in.Settings {
		settings = append(settings, k+"="+v)
	}
	slices.Sort(settings)
	b.WriteString(strings.Join(settings, ",") + ";" + in.Now.UTC().Truncate(time.Minute).Format(time.RFC3339))
	return b.String()
}

// settings returns the settings the hooks are called with, read as the single-node
// path reads them (extsettings.Reader: one definition).
func (h *Handler) settings(ctx context.Context) (map[string]string, error) {
	return extsettings.Reader{Client: h.opts.Reader, Name: h.opts.ExtensionConfig, Defaults: h.opts.Settings}.Settings(ctx)
}

// errPlan marks a Cluster the planner cannot read.
var errPlan = errors.New("plan the Cluster")

func missingObject(v Verdict) bool {
	for _, r := range v.Refusals {
		if r.Kind == preview.CauseMissingObject {
			return true
		}
	}
	return false
}

// snapshots reads the Cluster as stored and applies the write to it, as `capi-inplace
// plan -f` does (preview.Gatherer.ProposeChange: a write of a Cluster's topology also
// brings the writes the topology controller derives from it). found is false when the
// Cluster does not exist. fallback, when set, says why a topology write is judged by
// its version alone.
func (h *Handler) snapshots(ctx context.Context, reader client.Reader, settings map[string]string, namespace, cluster string, old, written *unstructured.Unstructured) (live, proposed preview.Snapshot, fallback *preview.TopologyFallbackError, found bool, err error) {
	g := preview.Gatherer{Reader: reader, Upgrades: h.upgrades(settings), Secrets: h.opts.Secrets}
	live, _, err = g.Gather(ctx, namespace, cluster)
	if errors.Is(err, preview.ErrClusterNotFound) {
		return preview.Snapshot{}, preview.Snapshot{}, nil, false, nil
	}
	if err != nil {
		return preview.Snapshot{}, preview.Snapshot{}, nil, false, err
	}
	p, err := g.ProposeChange(ctx, &live, []*unstructured.Unstructured{Change(old, written)})
	if err != nil {
		return preview.Snapshot{}, preview.Snapshot{}, nil, false, err
	}
	return live, p.Snapshot, p.TopologyFallback, true, nil
}

// upgrades is how the preview answers a ClusterClass that names this extension's
// GenerateUpgradePlan hook: with the hook's own planner and the settings Cluster API
// calls it with; the namespace opted in (handle checks it first).
func (h *Handler) upgrades(settings map[string]string) *preview.ChainedUpgrades {
	if h.opts.ExtensionConfig == "" {
		return nil
	}
	return &preview.ChainedUpgrades{
		Planner: h.opts.Planner, Extension: planner.UpgradePlanHandler + "." + h.opts.ExtensionConfig,
		Settings: settings, AssumeOptedIn: true,
	}
}

// clustersOf returns the Clusters whose Machines a write can roll out: the Cluster
// itself, the Cluster a KubeadmControlPlane or MachineDeployment belongs to, and for a
// template every Cluster whose KubeadmControlPlane or MachineDeployments reference it.
func (h *Handler) clustersOf(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	switch obj.GetKind() {
	case "Cluster":
		return []string{obj.GetName()}, nil
	case "MachineDeployment":
		name, _, _ := unstructured.NestedString(obj.Object, "spec", "clusterName")
		return nonEmpty(name), nil
	case "KubeadmControlPlane":
		if name := obj.GetLabels()[clusterv1.ClusterNameLabel]; name != "" {
			return []string{name}, nil
		}
		for _, ref := range obj.GetOwnerReferences() {
			if ref.Kind == "Cluster" {
				return []string{ref.Name}, nil
			}
		}
		return nil, nil
	}
	return h.referencingClusters(ctx, obj)
}

// referencingClusters lists the KubeadmControlPlanes and MachineDeployments of the
// template's namespace that reference it.
func (h *Handler) referencingClusters(ctx context.Context, tmpl *unstructured.Unstructured) ([]string, error) {
	key := preview.KeyOf(tmpl)
	refers := func(ref clusterv1.ContractVersionedObjectReference) bool {
		return ref.IsDefined() && preview.RefKey(ref) == key
	}
	var out []string
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	ns := client.InNamespace(tmpl.GetNamespace())
	kcps := &controlplanev1.KubeadmControlPlaneList{}
	if err := h.opts.Reader.List(ctx, kcps, ns); err != nil {
		return nil, fmt.Errorf("list KubeadmControlPlanes referencing %s: %w", key, err)
	}
	for i := range kcps.Items {
		kcp := &kcps.Items[i]
		if refers(kcp.Spec.MachineTemplate.Spec.InfrastructureRef) {
			add(kcp.Labels[clusterv1.ClusterNameLabel])
			for _, ref := range kcp.OwnerReferences {
				if ref.Kind == "Cluster" {
					add(ref.Name)
				}
			}
		}
	}
	mds := &clusterv1.MachineDeploymentList{}
	if err := h.opts.Reader.List(ctx, mds, ns); err != nil {
		return nil, fmt.Errorf("list MachineDeployments referencing %s: %w", key, err)
	}
	for i := range mds.Items {
		md := &mds.Items[i]
		if refers(md.Spec.Template.Spec.InfrastructureRef) || refers(md.Spec.Template.Spec.Bootstrap.ConfigRef) {
			add(md.Spec.ClusterName)
		}
	}
	return out, nil
}

// machineSetDeletion refuses deleting a MachineDeployment's MachineSet that still has
// Machines: the MachineDeployment creates new Machines in their place.
func (h *Handler) machineSetDeletion(ctx context.Context, old *unstructured.Unstructured,
	errored func(int32, error) (admission.Response, string, []preview.CauseKind)) (admission.Response, string, []preview.CauseKind) {
	ms := &clusterv1.MachineSet{}
	if err := fromUnstructured(old, ms); err != nil {
		return errored(http.StatusBadRequest, err)
	}
	md := ""
	for _, ref := range ms.OwnerReferences {
		if ref.Kind == "MachineDeployment" && ptr.Deref(ref.Controller, false) {
			md = ref.Name
		}
	}
	if md == "" || ms.Annotations[inplacev1.AllowReplaceAnnotation] != "" {
		return admission.Allowed(""), ResultAllowed, nil
	}
	cluster := &clusterv1.Cluster{}
	if err := h.opts.Reader.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: ms.Spec.ClusterName}, cluster); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return admission.Allowed(""), ResultAllowed, nil
		}
		return errored(http.StatusServiceUnavailable, fmt.Errorf("read Cluster %s/%s: %w", ms.Namespace, ms.Spec.ClusterName, err))
	}
	if !cluster.DeletionTimestamp.IsZero() || cluster.Annotations[inplacev1.GuardAnnotation] == inplacev1.GuardDisabled {
		return admission.Allowed(""), ResultAllowed, nil
	}
	owner := &clusterv1.MachineDeployment{}
	if err := h.opts.Reader.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: md}, owner); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return admission.Allowed(""), ResultAllowed, nil
		}
		return errored(http.StatusServiceUnavailable, fmt.Errorf("read MachineDeployment %s/%s: %w", ms.Namespace, md, err))
	}
	if !owner.DeletionTimestamp.IsZero() {
		return admission.Allowed(""), ResultAllowed, nil
	}
	machines := &clusterv1.MachineList{}
	if err := h.opts.Reader.List(ctx, machines, client.InNamespace(ms.Namespace), client.MatchingLabels{clusterv1.MachineSetNameLabel: format.MustFormatValue(ms.Name)}); err != nil {
		return errored(http.StatusServiceUnavailable, fmt.Errorf("list Machines of MachineSet %s/%s: %w", ms.Namespace, ms.Name, err))
	}
	var names []string
	for i := range machines.Items {
		if machines.Items[i].DeletionTimestamp.IsZero() {
			names = append(names, machines.Items[i].Name)
		}
	}
	if len(names) == 0 {
		return admission.Allowed(""), ResultAllowed, nil
	}
	v := Verdict{}
	for _, n := range names {
		v.Refusals = append(v.Refusals, Refusal{Machine: n, Kind: preview.CauseRollout, Message: fmt.Sprintf(
			"deleting MachineSet %s deletes its Machines and MachineDeployment %s creates new ones instead of updating them in-place", ms.Name, md)})
	}
	return admission.Denied(v.Message("MachineSet "+ms.Namespace+"/"+ms.Name, ms.Spec.ClusterName)), ResultRefused, v.Kinds()
}

// derivedFromTopology reports whether the topology controller manages an object.
func derivedFromTopology(obj *unstructured.Unstructured) bool {
	_, ok := obj.GetLabels()[clusterv1.ClusterTopologyOwnedLabel]
	return ok
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func fromUnstructured(u *unstructured.Unstructured, obj any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}
