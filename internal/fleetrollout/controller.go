package fleetrollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/rollout"
)

// ControllerName names the controller.
const ControllerName = "capi-inplace-fleet-rollout"

// DefaultInterval is how often a FleetRollout that is not finished is looked at again.
const DefaultInterval = 30 * time.Second

// Options configure SetupWithManager.
type Options struct {
	// Interval is how often an unfinished FleetRollout is looked at again;
	// DefaultInterval when zero.
	Interval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Metrics, when set, show each rollout's status and count its halts
	// (NewMetrics on controller-runtime's registry in the extension).
	Metrics *Metrics
}

// SetupWithManager registers the FleetRollout controller with mgr (leader-elected,
// as every controller of mgr) and the API types it reads with mgr's scheme.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	for _, add := range []func(*runtime.Scheme) error{inplacev1.AddToScheme, clusterv1.AddToScheme, controlplanev1.AddToScheme, corev1.AddToScheme} {
		if err := add(mgr.GetScheme()); err != nil {
			return fmt.Errorf("fleet rollout: register types: %w", err)
		}
	}
	// A management cluster without the CRD (installed with config/crd) runs no
	// FleetRollout: the controller is left out rather than failing the extension.
	gk := inplacev1.GroupVersion.WithKind(inplacev1.FleetRolloutKind).GroupKind()
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, inplacev1.GroupVersion.Version); err != nil {
		if meta.IsNoMatchError(err) {
			mgr.GetLogger().Info("FleetRollout CRD not installed: fleet rollouts are off", "crd", "fleetrollouts."+inplacev1.GroupName)
			return nil
		}
		return fmt.Errorf("fleet rollout: look up %s: %w", gk, err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Interval: opts.Interval, Now: opts.Now, Metrics: opts.Metrics, Recorder: mgr.GetEventRecorder(ControllerName)}
	// Its own status writes do not wake it: the timer and spec changes do.
	return ctrl.NewControllerManagedBy(mgr).Named(ControllerName).
		For(&inplacev1.FleetRollout{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

// Reconciler runs one pass of a FleetRollout (package doc).
type Reconciler struct {
	Client   client.Client
	Interval time.Duration
	Now      func() time.Time
	// Metrics and Recorder may be nil: nothing is measured or recorded.
	Metrics  *Metrics
	Recorder EventRecorder
}

// Reconcile runs one pass: observe, decide (rollout.Step), write, record, status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var fr inplacev1.FleetRollout
	if err := r.Client.Get(ctx, req.NamespacedName, &fr); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: its series go with it (the deletion's event brings it here).
			r.Metrics.Forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fr.DeletionTimestamp.IsZero() {
		r.Metrics.Forget(fr.Name)
		return ctrl.Result{}, nil
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	target := fr.Spec.Target.Version

	objs, err := r.selected(ctx, &fr)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs := make([]rollout.Observation, 0, len(objs))
	for _, o := range objs {
		obs = append(obs, observe(target, o))
	}
	d := rollout.Step(rollout.Input{Name: fr.Name, Spec: fr.Spec, Generation: fr.Generation, Status: fr.Status, Clusters: obs, Now: now()})

	byKey := make(map[rollout.Key]clusterObjects, len(objs))
	for _, o := range objs {
		byKey[rollout.Key{Namespace: o.Cluster.Namespace, Name: o.Cluster.Name}] = o
	}
	var results []rollout.Result
	for _, k := range d.Start {
		res := start(ctx, r.Client, byKey[k], target)
		if res.Outcome != rollout.Written {
			log.Info("Target not written", "cluster", k.String(), "reason", res.Reason, "message", res.Message)
		}
		results = append(results, res)
	}
	// A plain Cluster's MachineDeployments follow its control plane, paused or not:
	// a Cluster already started finishes by its own rules.
	var errs []error
	for i := range d.Status.Clusters {
		e := &d.Status.Clusters[i]
		if e.State != inplacev1.FleetClusterUpdating {
			continue
		}
		res, err := advance(ctx, r.Client, byKey[rollout.Key{Namespace: e.Namespace, Name: e.Name}], target)
		if err != nil {
			errs = append(errs, err)
		}
		if res != nil {
			results = append(results, *res)
		}
	}
	// A merge patch, not an update: a person editing the spec meanwhile must not
	// make this pass's status (and the starts it records) be lost. Only this
	// controller, on the elected leader, one pass at a time, writes the status.
	orig := fr.DeepCopy()
	fr.Status = rollout.Record(fr.Name, fr.Spec, d.Status, results, now())
	if err := r.Client.Status().Patch(ctx, &fr, client.MergeFrom(orig)); err != nil {
		// The writes above are observed on the next pass and adopted.
		return ctrl.Result{}, fmt.Errorf("write FleetRollout %s status: %w", fr.Name, err)
	}
	// Only once the status is written: a pass whose write failed records nothing,
	// and the next one finds the same transitions against the same old status.
	events, halt := transitions(orig.Status, fr.Status)
	if r.Recorder != nil {
		for _, e := range events {
			r.Recorder.Eventf(&fr, nil, e.Type, e.Reason, e.Action, "%s", e.Note)
		}
	}
	r.Metrics.Observe(fr.Name, fr.Status, halt)
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	if fr.Status.Phase == inplacev1.FleetPhaseCompleted || (fr.Status.Phase == inplacev1.FleetPhaseAborted && fr.Status.Counts.Updating == 0) {
		return ctrl.Result{}, nil
	}
	after := interval
	if d.RequeueAfter > 0 && d.RequeueAfter < after {
		after = d.RequeueAfter
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// selected reads every Cluster the rollout's selectors choose, with its namespace,
// control plane, MachineDeployments and Machines.
func (r *Reconciler) selected(ctx context.Context, fr *inplacev1.FleetRollout) ([]clusterObjects, error) {
	sel, err := metav1.LabelSelectorAsSelector(&fr.Spec.ClusterSelector)
	if err != nil {
		return nil, fmt.Errorf("clusterSelector: %w", err)
	}
	var clusters clusterv1.ClusterList
	if err := r.Client.List(ctx, &clusters, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list Clusters: %w", err)
	}
	namespaces := map[string]*corev1.Namespace{}
	var out []clusterObjects
	for i := range clusters.Items {
		c := &clusters.Items[i]
		ns, seen := namespaces[c.Namespace]
		if !seen {
			ns = &corev1.Namespace{}
			if err := r.Client.Get(ctx, client.ObjectKey{Name: c.Namespace}, ns); err != nil {
				if !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("get namespace %s: %w", c.Namespace, err)
				}
				ns = nil
			}
			namespaces[c.Namespace] = ns
		}
		var nsLabels map[string]string
		if ns != nil {
			nsLabels = ns.Labels
		}
		ok, err := selects(fr.Spec.NamespaceSelector, nsLabels)
		if err != nil {
			return nil, fmt.Errorf("namespaceSelector: %w", err)
		}
		if !ok {
			continue
		}
		o, err := r.objects(ctx, c, ns)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func (r *Reconciler) objects(ctx context.Context, c *clusterv1.Cluster, ns *corev1.Namespace) (clusterObjects, error) {
	o := clusterObjects{Cluster: c, Namespace: ns}
	inCluster := []client.ListOption{client.InNamespace(c.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}}
	var machines clusterv1.MachineList
	if err := r.Client.List(ctx, &machines, inCluster...); err != nil {
		return o, fmt.Errorf("list Machines of Cluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	o.Machines = machines.Items
	if o.topology() {
		return o, nil
	}
	ref := c.Spec.ControlPlaneRef
	if ref.Kind != "KubeadmControlPlane" || ref.APIGroup != controlplanev1.GroupVersion.Group {
		return o, nil
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: ref.Name}, kcp); err != nil {
		if apierrors.IsNotFound(err) {
			return o, nil
		}
		return o, fmt.Errorf("get KubeadmControlPlane of Cluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	o.ControlPlane = kcp
	var mds clusterv1.MachineDeploymentList
	if err := r.Client.List(ctx, &mds, inCluster...); err != nil {
		return o, fmt.Errorf("list MachineDeployments of Cluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	o.MachineDeployments = mds.Items
	return o, nil
}
