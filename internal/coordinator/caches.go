package coordinator

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/cachedread"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
)

// Caches are the informer-backed sources a steady-state call answers from
// (Options.Caches); nil fields are not allowed, a nil *Caches reads everything live.
//
// Coherence, and why a stale read is safe: a cache lags the API by at most a watch
// event, and a call that reads from caches may only answer "in progress" with nothing
// written of its own (quiet below: the agent is working, the node is settling). Every
// other answer (done, a failure, a refusal of the request) and every step that writes
// (cordon, drain, publish, uncordon, conditions, the fleet record) is decided again
// from live reads, exactly as without caches. A cache that is behind can therefore
// only make a call answer "in progress" and be called again; it can never report done
// for what was not applied, nor act on an old state. A cache that is ahead of the
// truth does not exist: informers only ever hold what the API server sent.
//
// One read of every call, live or not, comes from a cache: the MachineHealthChecks
// that decide whether the update needs a remediation hold (remediation.go). A cache
// that is behind can miss one created a moment ago; the hold is checked again on
// every call of the update, so it is set on the next one, seconds later.
type Caches struct {
	// Management reads Machines, Namespaces, Clusters, MachineHealthChecks and the
	// objects Machines and Clusters reference, from informers (SyncedReader over the
	// manager's cache).
	Management client.Reader
	// Secrets reads management Secrets (SecretCache): the kubeconfigs of workload
	// clusters and the Secrets KubeadmConfig files take their content from.
	Secrets client.Reader
	// Workloads serves per-cluster caches of Nodes, plan Secrets and the agent's
	// DaemonSet (InformerWorkloadCaches).
	Workloads WorkloadCaches
}

// WorkloadCaches serves cached views of workload clusters.
type WorkloadCaches interface {
	// For returns a WorkloadCluster whose reads come from the cluster's caches (its
	// writes go to wc), and a channel closed at the next change of the Node named
	// node. ok is false while the caches are not synced or their watch failed
	// recently: the caller reads live then.
	For(ctx context.Context, cluster client.ObjectKey, wc *WorkloadCluster, node string) (cached *WorkloadCluster, changed <-chan struct{}, ok bool)
	// Forget drops the caches of a cluster (it did not answer, or its credentials
	// changed).
	Forget(cluster client.ObjectKey)
}

// errNotSynced: the cache cannot answer yet; the caller reads live.
var errNotSynced = errors.New("cache not synced")

// SyncedReader reads from an informer cache only once the informer of the object's
// kind has synced. Before that (the first read of a kind starts its informer), or if
// the informer cannot list (missing RBAC), it answers an error and the call reads
// live: a read never waits for a cache.
type SyncedReader struct{ Cache cache.Cache }

// Get implements client.Reader.
func (r SyncedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !cachedread.Synced(ctx, r.Cache, obj) {
		return errNotSynced
	}
	return r.Cache.Get(ctx, key, obj, opts...)
}

// List implements client.Reader for typed lists, as Get does: from the cache once
// the informer of the list's item kind has synced (the coordinator lists only
// MachineHealthChecks this way, remediation.go).
func (r SyncedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if !cachedread.ListSynced(ctx, r.Cache, list) {
		return errNotSynced
	}
	return r.Cache.List(ctx, list, opts...)
}

// cacheReads is the management client of a call served from caches: reads from
// the caches, writes (and the REST mapper) live.
type cacheReads struct {
	client.Client
	objects client.Reader
	secrets client.Reader
}

func (c cacheReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if isSecret(obj) {
		return c.secrets.Get(ctx, key, obj, opts...)
	}
	return c.objects.Get(ctx, key, obj, opts...)
}

func (c cacheReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.objects.List(ctx, list, opts...)
}

// cachedClusters hands a call served from caches the cached view of its workload
// cluster, and keeps the channel of the next change of the call's Node (node) for
// the linger.
type cachedClusters struct {
	live    WorkloadClusters
	caches  WorkloadCaches
	node    string
	changed <-chan struct{}
}

func (w *cachedClusters) Get(ctx context.Context, key client.ObjectKey) (*WorkloadCluster, error) {
	wc, err := w.live.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	cached, changed, ok := w.caches.For(ctx, key, wc, w.node)
	if !ok {
		return nil, errNotSynced
	}
	w.changed = changed
	return cached, nil
}

// Invalidate does nothing: the call falls back to live reads, which invalidate.
func (*cachedClusters) Invalidate(client.ObjectKey) {}

// fromCaches answers a call from the caches when it is quiet (see Caches); ok false
// means the call must run on live reads. changed is closed at the next change of the
// Machine's Node (nil when unknown). seen is the management objects as the caches
// hold them (nil when they could not be read), for reusedRead.
func (c *Coordinator) fromCaches(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) (out Outcome, changed <-chan struct{}, seen *desiredObjects, ok bool) {
	if c.opts.Caches == nil {
		return Outcome{}, nil, nil, false
	}
	clusters := &cachedClusters{live: c.opts.Clusters, caches: c.opts.Caches.Workloads}
	view := &Coordinator{opts: c.opts, fromCache: true, later: c.later}
	view.opts.Client = cacheReads{Client: c.opts.Client, objects: c.opts.Caches.Management, secrets: c.opts.Caches.Secrets}
	view.opts.Clusters = clusters
	// Any refusal or failure read from a cache is checked again live.
	d, _, ok := view.readStored(ctx, req)
	if !ok {
		return Outcome{}, nil, nil, false
	}
	seen = &desiredObjects{stored: d.stored, bootstrap: d.bootstrap, infra: d.infra, cluster: d.cluster}
	clusters.node = d.stored.Status.NodeRef.Name
	s, _, ok := view.loadScope(ctx, d)
	if !ok {
		return Outcome{}, nil, seen, false
	}
	// The same decisions and steps as a live call (act), answering needsLive for
	// anything that is not a quiet "in progress" (act, alreadyPublished, workloadFailure).
	if out = view.act(ctx, s); out.live || out.Kind != OutcomeInProgress {
		return Outcome{}, nil, seen, false
	}
	return out, clusters.changed, seen, true
}

// reusedRead reports whether a live check may reuse prev, the management objects
// this call read live before (the Machine, its bootstrap config and infrastructure
// machine, the Cluster), instead of reading them again: only while the caches
// (seen) hold every one of them as prev has them in all that a call decides on
// (decidedOn): nothing but this call changed what it decides on since (its own
// writes update prev's copies; a cache that has not caught up with them only costs
// a live read). A lingering call's live checks are mostly the one at the agent's
// finish, where the workload side (Node, plan Secret) changed and is read live
// again anyway; the management side of a call holding Cluster API's worker rarely
// changes within the linger, except in what Cluster API itself writes as the update
// goes (its Machine and Cluster conditions), which no decision reads.
//
// A reused copy can carry an older resourceVersion than the server's. Every write
// made from it either carries that resourceVersion (the conditions, the fleet
// record: a conflict re-reads and applies again) or is a merge patch of fields
// only this call's decisions set (annotations), so an old copy costs a conflict,
// never a lost update.
func reusedRead(prev, seen *desiredObjects) bool {
	if prev == nil || seen == nil || prev.stored == nil || seen.stored == nil {
		return false
	}
	cluster := func(r *clusterRead) (*clusterv1.Cluster, bool) {
		if r == nil {
			return nil, true
		}
		if r.err != nil || r.cluster == nil {
			return nil, false
		}
		return r.cluster, true
	}
	prevCluster, okPrev := cluster(prev.cluster)
	seenCluster, okSeen := cluster(seen.cluster)
	return okPrev && okSeen &&
		equality.Semantic.DeepEqual(decidedOnMachine(prev.stored), decidedOnMachine(seen.stored)) &&
		equality.Semantic.DeepEqual(decidedOnObject(prev.bootstrap), decidedOnObject(seen.bootstrap)) &&
		equality.Semantic.DeepEqual(decidedOnObject(prev.infra), decidedOnObject(seen.infra)) &&
		equality.Semantic.DeepEqual(decidedOnCluster(prevCluster), decidedOnCluster(seenCluster))
}

// decidedOnMachine is m without what no decision of a call reads: its type meta
// (set by a cache, not by a typed live read), resourceVersion, managed fields, and
// its status but for its node and the InPlaceUpdate condition (Cluster API
// rewrites its own conditions as an update goes). decidedOnCluster and
// decidedOnObject are the same for the Cluster and for a bootstrap config or
// infrastructure machine (whose status no decision reads).
func decidedOnMachine(m *clusterv1.Machine) *clusterv1.Machine {
	v := m.DeepCopy()
	v.TypeMeta, v.ResourceVersion, v.ManagedFields = metav1.TypeMeta{}, "", nil
	v.Status = clusterv1.MachineStatus{NodeRef: m.Status.NodeRef, Conditions: ownCondition(m.Status.Conditions)}
	return v
}

func decidedOnCluster(c *clusterv1.Cluster) *clusterv1.Cluster {
	if c == nil {
		return nil
	}
	v := c.DeepCopy()
	v.TypeMeta, v.ResourceVersion, v.ManagedFields = metav1.TypeMeta{}, "", nil
	v.Status = clusterv1.ClusterStatus{Conditions: ownCondition(c.Status.Conditions)}
	return v
}

func decidedOnObject(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	v := u.DeepCopy()
	v.SetResourceVersion("")
	v.SetManagedFields(nil)
	delete(v.Object, "status")
	return v.Object
}

// ownCondition is the InPlaceUpdate condition of conds, the only one a call reads.
func ownCondition(conds []metav1.Condition) []metav1.Condition {
	if c := meta.FindStatusCondition(conds, inplacev1.InPlaceUpdateCondition); c != nil {
		return []metav1.Condition{*c}
	}
	return nil
}

// quiet reports whether update would answer d with nothing written of its own: the
// decisions a cached read may answer (see Caches). The fleet controls write when an
// operator's request is pending or a paused cluster holds a new update.
func quiet(s *scope, o Observation, d Decision) bool {
	for _, a := range []string{inplacev1.RetryAnnotation, inplacev1.CancelAnnotation} {
		if _, ok := s.stored.Annotations[a]; ok {
			return false
		}
	}
	if _, ok := s.cluster.Annotations[inplacev1.ResumeAnnotation]; ok {
		return false
	}
	switch d.Action {
	case ActWait:
		return !o.Paused || o.Started
	case ActAwaitAgent:
		return true
	}
	return false
}

// alreadyPublished reports whether publish would write nothing: the plan Secret holds this
// plan sealed to the node's key and the node points at it.
func alreadyPublished(s *scope) bool {
	if s.planSecret == nil || s.planSecret.Labels[inplacev1.PlanNodeLabel] != s.node.Name || s.agentKey == nil {
		return false
	}
	if !nodeplan.Holds(s.planSecret.Data[inplacev1.PlanSecretDataKey], s.planHash, s.agentKey) {
		return false
	}
	ann := s.node.GetAnnotations()
	return ann[inplacev1.DesiredPlanAnnotation] == s.planHash && ann[inplacev1.PlanPublishedAnnotation] != ""
}

// lingerCached is lingerUpdate for a coordinator with caches: each check is a call
// (from the caches when quiet), and between checks it waits for a change of the
// Machine's Node (a watch event) instead of a fixed pause. The channel of that change
// is taken before the check reads the Node, from the caches or live, so no change
// after the read is missed and the wait lasts until the linger's deadline; the
// fixed lingerPoll pause is left only for a check that got no channel (the
// cluster's caches are not served yet). A change the check itself wrote (a cordon,
// a published plan) closes the channel too: the next check is then one from the
// caches, which do hold that change by the time the channel closes. Either way a
// missed event only delays the next check, never changes its answer.
func (c *Coordinator) lingerCached(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) Outcome {
	deadline := time.Now().Add(c.opts.Linger)
	var read *desiredObjects // this call's live read of the management objects
	for {
		out, changed := c.call(ctx, req, &read)
		if out.Kind != OutcomeInProgress || out.RetryAfterSeconds != waitRetry(0) || !time.Now().Add(lingerPoll).Before(deadline) {
			return out
		}
		pause := lingerPoll
		if changed != nil {
			pause = time.Until(deadline)
		}
		wait := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			wait.Stop()
			return out
		case <-changed:
			wait.Stop()
		case <-wait.C:
			if changed != nil {
				return out
			}
		}
		mark(ctx, "wait")
	}
}

// call is one check of a call with caches: from the caches when quiet, else live.
// changed is closed at the next change of the Machine's Node after the check read
// it (nil when unknown). read is the call's live read of the management objects,
// made by the first live check and reused by later ones while the caches show them
// unchanged (reusedRead).
func (c *Coordinator) call(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, read **desiredObjects) (out Outcome, changed <-chan struct{}) {
	out, changed, seen, ok := c.fromCaches(ctx, req)
	mark(ctx, "cached")
	if ok {
		return out, changed
	}
	if reusedRead(*read, seen) {
		mark(ctx, "reused")
	} else {
		var hint *clusterv1.Machine
		if seen != nil {
			hint = seen.stored
		}
		d, out, ok := c.readStoredHinted(ctx, req, hint)
		mark(ctx, "stored")
		if !ok {
			*read = nil
			return out, nil
		}
		*read = &d
	}
	d := **read
	// Before update reads the Node live: a change after that read closes it.
	changed = c.nodeChanges(ctx, d.stored)
	out = c.update(ctx, d)
	if out.Kind != OutcomeInProgress || out.RetryAfterSeconds != waitRetry(0) {
		return out, nil
	}
	return out, changed
}

// nodeChanges is the channel closed at the next change of the Node of the stored
// Machine m, nil when its cluster's caches are not served.
func (c *Coordinator) nodeChanges(ctx context.Context, m *clusterv1.Machine) <-chan struct{} {
	key := client.ObjectKey{Namespace: m.Namespace, Name: clusterNameOf(m)}
	wc, err := c.opts.Clusters.Get(ctx, key)
	if err != nil {
		return nil
	}
	_, changed, ok := c.opts.Caches.Workloads.For(ctx, key, wc, m.Status.NodeRef.Name)
	if !ok {
		return nil
	}
	return changed
}

func isSecret(obj client.Object) bool {
	_, ok := obj.(*corev1.Secret)
	return ok
}
