package singlenode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/planner"
)

// ControllerName names the controller and its Event source.
const ControllerName = "capi-inplace-single-node-control-plane"

// Options configure SetupWithManager.
type Options struct {
	// Updater drives node updates: the coordinator. Required.
	Updater Updater
	// Planner decides what can be done in place: the hooks' planner. Required.
	Planner *planner.Planner
	// Workloads reaches workload clusters (their kubeadm-config ConfigMap). Required.
	Workloads WorkloadClients
	// Settings are the planner's settings, as an ExtensionConfig's spec.settings are
	// for hook calls (disableInPlaceUpdates=true refuses every change).
	Settings map[string]string
	// ExtensionConfigName names the ExtensionConfig that registers the hooks: its
	// spec.settings (read on every decision) overlay Settings, so the single-node path
	// honours what Cluster API passes to the hooks. Empty: Settings only.
	ExtensionConfigName string
	// ControllerUsername, when set, is the user our manager authenticates as (for a
	// Pod: system:serviceaccount:<namespace>:<name>); a hold release from any other user
	// is refused (the hold is put back). Empty: any write carrying the release
	// annotation with the current hold value releases (the controller's writes do).
	ControllerUsername string
	// WebhookPath is where the hold webhook is served; DefaultWebhookPath when empty.
	WebhookPath string
	// WebhookServer serves the hold webhook; mgr.GetWebhookServer() when nil. Pass the
	// runtime hook server (CAPI's exp/runtime/server.Server embeds a controller-runtime
	// webhook.Server) to serve it on the hooks' port and certificate.
	WebhookServer WebhookRegistry
	// RecheckAfter is how often an update that failed on a deadline is asked
	// about again (a late commit ends it as done); 30 s when zero.
	RecheckAfter time.Duration
}

// WebhookRegistry is the part of controller-runtime's webhook.Server we use.
type WebhookRegistry interface {
	Register(path string, hook http.Handler)
}

// SetupWithManager registers the hold webhook on mgr's webhook server (at
// Options.WebhookPath; register it with MutatingWebhook) and the controller that drives
// held KubeadmControlPlanes. It adds the Cluster API types it needs to mgr's scheme.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.Updater == nil || opts.Planner == nil || opts.Workloads == nil {
		return errors.New("single-node control plane: Options.Updater, Planner and Workloads are required")
	}
	if opts.WebhookPath == "" {
		opts.WebhookPath = DefaultWebhookPath
	}
	scheme := mgr.GetScheme()
	for _, add := range []func(*runtime.Scheme) error{clusterv1.AddToScheme, controlplanev1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("single-node control plane: register types: %w", err)
		}
	}
	// Decisions read through a client without cache: a stale Machine must never make
	// the controller release a hold or call an update twice for different specs.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme, Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("single-node control plane: client: %w", err)
	}
	registry := opts.WebhookServer
	if registry == nil {
		registry = mgr.GetWebhookServer()
	}
	registry.Register(opts.WebhookPath, &webhook.Admission{Handler: &holdWebhook{
		reader:         direct,
		decoder:        admission.NewDecoder(scheme),
		controllerUser: opts.ControllerUsername,
	}})

	r := &Reconciler{
		Client:    direct,
		Updater:   opts.Updater,
		Planner:   opts.Planner,
		Workloads: opts.Workloads,
		Recorder:  mgr.GetEventRecorder(ControllerName),
		Settings:  opts.Settings,

		ExtensionConfigName: opts.ExtensionConfigName,
		RecheckAfter:        opts.RecheckAfter,
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&controlplanev1.KubeadmControlPlane{}, builder.WithPredicates(heldPredicate())).
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(controlPlaneOf)).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestForOwner(scheme, mgr.GetRESTMapper(), &controlplanev1.KubeadmControlPlane{}, handler.OnlyControllerOwner()),
			builder.WithPredicates(operatorRequest())).
		Complete(r)
}

// operatorRequest passes Machine events that carry an operator's request: a Machine
// with the retry annotation (ActionRetry), and the cancel annotation's arrival
// (ActionCancel) or removal (the update starts again), which no KCP event
// announces.
func operatorRequest() predicate.Predicate {
	has := func(o client.Object, key string) bool {
		_, ok := o.GetAnnotations()[key]
		return ok
	}
	either := func(o client.Object) bool {
		return has(o, inplacev1.RetryAnnotation) || has(o, inplacev1.CancelAnnotation)
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return either(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return has(e.ObjectNew, inplacev1.RetryAnnotation) ||
				has(e.ObjectOld, inplacev1.CancelAnnotation) != has(e.ObjectNew, inplacev1.CancelAnnotation)
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { return either(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return either(e.Object) },
	}
}

// heldPredicate passes KCP events where either side carries the hold, so the
// controller wakes for holds and their release and ignores every other KCP update.
// Every creation passes too (also each KCP at start-up): a KCP created for an opted-in
// Cluster gets the Cluster's opt-in copied at once (copyOptIn), not only at the
// Cluster's next event.
func heldPredicate() predicate.Predicate {
	held := func(o client.Object) bool {
		kcp, ok := o.(*controlplanev1.KubeadmControlPlane)
		return ok && IsHeld(kcp)
	}
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		UpdateFunc:  func(e event.UpdateEvent) bool { return held(e.ObjectOld) || held(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(e event.GenericEvent) bool { return held(e.Object) },
	}
}

// controlPlaneOf maps a Cluster to its KubeadmControlPlane (opt-in changes).
func controlPlaneOf(_ context.Context, o client.Object) []reconcile.Request {
	cluster, ok := o.(*clusterv1.Cluster)
	if !ok || cluster.Spec.ControlPlaneRef.Kind != "KubeadmControlPlane" || cluster.Spec.ControlPlaneRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Spec.ControlPlaneRef.Name}}}
}
