package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// The UpdateMachine hook is a trigger, never a source of truth: the hook server has
// no client authentication (upstream's Runtime SDK has none), so whoever can reach it
// could otherwise cordon, drain and rewrite any node, and pick which Secrets are
// copied into a plan. Everything a plan is built from is read here from the
// management API, as stored; the request only names the Machine, and a request that
// disagrees with what is stored is refused before anything is touched.

// hookName is UpdateMachine's name in CAPI's pending-hooks annotation
// (runtimecatalog.HookName(runtimehooksv1.UpdateMachine)).
const hookName = "UpdateMachine"

// desiredObjects is what a node update is computed from.
type desiredObjects struct {
	// stored is the Machine as stored (identity, labels, status, nodeRef).
	stored *clusterv1.Machine
	// machine carries the desired spec: the stored spec on the hook path.
	machine *clusterv1.Machine
	// bootstrap and infra are the desired bootstrap config and infrastructure
	// machine; nil when the Machine has none (or, for bootstrap, not a KubeadmConfig).
	bootstrap *unstructured.Unstructured
	infra     *unstructured.Unstructured
	// cluster is the stored Machine's Cluster read with them; nil: loadScope reads it.
	cluster *clusterRead
}

// markedForInPlaceUpdate reports whether Cluster API's owner controller marked the
// Machine for an in-place update, exactly as upstream's Machine controller requires
// before it calls UpdateMachine (core/reconcilers/machine/
// machine_controller_inplace_update.go): the update-in-progress annotation and
// UpdateMachine in the pending-hooks annotation.
func markedForInPlaceUpdate(m *clusterv1.Machine) bool {
	ann := m.GetAnnotations()
	if _, ok := ann[clusterv1.UpdateInProgressAnnotation]; !ok {
		return false
	}
	return slices.Contains(strings.Split(ann[runtimev1.PendingHooksAnnotation], ","), hookName)
}

// clusterNameOf is the Cluster a stored Machine belongs to.
func clusterNameOf(m *clusterv1.Machine) string {
	if m.Spec.ClusterName != "" {
		return m.Spec.ClusterName
	}
	return m.Labels[clusterv1.ClusterNameLabel]
}

// readStored reads the Machine a request names, checks that the request may act on
// it, and returns the stored objects. ok false: answer out and touch nothing.
func (c *Coordinator) readStored(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) (desiredObjects, Outcome, bool) {
	return c.readStoredHinted(ctx, req, nil)
}

// prefetched is a read of a Machine's reference started alongside the Machine's
// own, from the references of hint (readStoredHinted); used only if the Machine as
// read references the same object.
type prefetched struct {
	ref clusterv1.ContractVersionedObjectReference
	obj *unstructured.Unstructured
	err error
}

// readStoredHinted is readStored; hint, when not nil, is the Machine as an informer
// holds it, whose references (bootstrap config, infrastructure machine, Cluster) are
// read at the same time as the Machine itself: one round trip instead of two. The
// request never picks what is read ahead (it is not authenticated, see above), and
// a read ahead is used only when the Machine as read names the same object; else it
// is read again.
func (c *Coordinator) readStoredHinted(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, hint *clusterv1.Machine) (desiredObjects, Outcome, bool) {
	m := &req.Desired.Machine
	if m.Name == "" || m.Namespace == "" {
		return desiredObjects{}, rejected("the request names no Machine"), false
	}
	key := client.ObjectKeyFromObject(m)
	// Independent reads run side by side (each is a round trip on a live call); their
	// answers are judged in the order of the checks, as if read one after the other.
	var nsOut Outcome
	var nsOK bool
	reads := []func(){func() { nsOut, nsOK = c.checkOptedIn(ctx, key.Namespace) }}
	var boot, infra *prefetched
	var ahead *clusterRead
	if hint != nil && hint.Namespace == key.Namespace && hint.Name == key.Name {
		readAhead := func(ref clusterv1.ContractVersionedObjectReference) *prefetched {
			if !ref.IsDefined() {
				return nil
			}
			p := &prefetched{ref: ref}
			reads = append(reads, func() { p.obj, p.err = c.getReferenced(ctx, key.Namespace, ref) })
			return p
		}
		boot = readAhead(hint.Spec.Bootstrap.ConfigRef)
		infra = readAhead(hint.Spec.InfrastructureRef)
		reads = append(reads, func() { ahead = c.prefetchCluster(ctx, hint) })
	}
	parallel := runParallel(reads...)
	stored, out, ok := c.readMachine(ctx, key)
	parallel.Wait()
	if !ok {
		return desiredObjects{}, out, false
	}
	if !nsOK {
		return desiredObjects{}, nsOut, false
	}
	if !markedForInPlaceUpdate(stored) {
		return desiredObjects{}, rejected(fmt.Sprintf("Machine %s is not marked for an in-place update by Cluster API (annotation %s and %s in %s): nothing was done",
			key, clusterv1.UpdateInProgressAnnotation, hookName, runtimev1.PendingHooksAnnotation)), false
	}
	if m.UID != "" && m.UID != stored.UID {
		return desiredObjects{}, mismatch(key, fmt.Sprintf("UID %s, stored %s", m.UID, stored.UID)), false
	}
	if !equality.Semantic.DeepEqual(m.Spec, stored.Spec) {
		return desiredObjects{}, mismatch(key, "spec fields "+strings.Join(specDiff(m.Spec, stored.Spec), ", ")), false
	}

	d := desiredObjects{stored: stored, machine: stored}
	var infraOut Outcome
	var infraOK bool
	reads = []func(){func() {
		d.infra, infraOut, infraOK = c.readReferenced(ctx, stored, "infrastructure machine", stored.Spec.InfrastructureRef, req.Desired.InfrastructureMachine, infra)
	}}
	if ahead != nil && clusterNameOf(hint) == clusterNameOf(stored) {
		d.cluster = ahead
	} else {
		reads = append(reads, func() { d.cluster = c.prefetchCluster(ctx, stored) })
	}
	parallel = runParallel(reads...)
	d.bootstrap, out, ok = c.readReferenced(ctx, stored, "bootstrap config", stored.Spec.Bootstrap.ConfigRef, req.Desired.BootstrapConfig, boot)
	parallel.Wait()
	if !ok {
		return desiredObjects{}, out, false
	}
	if !infraOK {
		return desiredObjects{}, infraOut, false
	}
	return d, Outcome{}, true
}

// runParallel runs each fn in a goroutine of its own; Wait waits for them all.
func runParallel(fns ...func()) *sync.WaitGroup {
	wg := &sync.WaitGroup{}
	for _, fn := range fns {
		wg.Go(fn)
	}
	return wg
}

// clusterRead is the Cluster of a stored Machine as read alongside its references
// (loadScope judges it; nil: not read, loadScope reads it).
type clusterRead struct {
	cluster *clusterv1.Cluster
	err     error
}

// prefetchCluster reads the Cluster the stored Machine names, nil when it names none.
func (c *Coordinator) prefetchCluster(ctx context.Context, m *clusterv1.Machine) *clusterRead {
	name := clusterNameOf(m)
	if name == "" {
		return nil
	}
	r := &clusterRead{cluster: &clusterv1.Cluster{}}
	r.err = c.opts.Client.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: name}, r.cluster)
	return r
}

func (c *Coordinator) readMachine(ctx context.Context, key client.ObjectKey) (*clusterv1.Machine, Outcome, bool) {
	stored := &clusterv1.Machine{}
	if err := c.opts.Client.Get(ctx, key, stored); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, rejected(fmt.Sprintf("Machine %s does not exist", key)), false
		}
		return nil, retryable(CauseManagementAPI, fmt.Sprintf("read Machine %s: %v", key, err)), false
	}
	return stored, Outcome{}, true
}

// checkOptedIn requires the namespace's opt-in label, the one the ExtensionConfig's
// namespaceSelector selects (config/extensionconfig).
func (c *Coordinator) checkOptedIn(ctx context.Context, namespace string) (Outcome, bool) {
	ns := &corev1.Namespace{}
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return rejected(fmt.Sprintf("namespace %s does not exist", namespace)), false
		}
		return retryable(CauseManagementAPI, fmt.Sprintf("read namespace %s: %v", namespace, err)), false
	}
	if !inplacev1.NamespaceEnabled(ns.Labels) {
		return rejected(fmt.Sprintf("namespace %s has not opted in to in-place updates (label %s=true): nothing was done", namespace, inplacev1.NamespaceEnabledLabel)), false
	}
	return Outcome{}, true
}

// readReferenced reads the object a stored Machine references and checks that the
// request's copy (raw JSON or an in-process object) names it and has its spec. A
// request may omit the object (only the stored one is used then), never replace it.
func (c *Coordinator) readReferenced(ctx context.Context, m *clusterv1.Machine, what string, ref clusterv1.ContractVersionedObjectReference, raw runtime.RawExtension, ahead *prefetched) (*unstructured.Unstructured, Outcome, bool) {
	mkey := client.ObjectKeyFromObject(m)
	sent, err := toUnstructured(raw)
	if err != nil {
		return nil, rejected(fmt.Sprintf("the request's %s of Machine %s does not decode: %v", what, mkey, err)), false
	}
	if !ref.IsDefined() {
		if sent != nil {
			return nil, mismatch(mkey, fmt.Sprintf("the request carries %s %s %s, the stored Machine references none", what, sent.GetKind(), sent.GetName())), false
		}
		return nil, Outcome{}, true
	}
	var stored *unstructured.Unstructured
	if ahead != nil && ahead.ref == ref {
		stored, err = ahead.obj, ahead.err
	} else {
		stored, err = c.getReferenced(ctx, m.Namespace, ref)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, rejected(fmt.Sprintf("%s %s %s of Machine %s does not exist", what, ref.Kind, ref.Name, mkey)), false
		}
		return nil, retryable(CauseManagementAPI, fmt.Sprintf("read %s %s %s of Machine %s: %v", what, ref.Kind, ref.Name, mkey, err)), false
	}
	if sent == nil {
		return stored, Outcome{}, true
	}
	switch {
	case sent.GetName() != stored.GetName() || (sent.GetNamespace() != "" && sent.GetNamespace() != stored.GetNamespace()) || sent.GetKind() != stored.GetKind():
		return nil, mismatch(mkey, fmt.Sprintf("the request carries %s %s %s/%s, the stored Machine references %s %s",
			what, sent.GetKind(), sent.GetNamespace(), sent.GetName(), ref.Kind, ref.Name)), false
	case sent.GroupVersionKind().Group != stored.GroupVersionKind().Group:
		return nil, mismatch(mkey, fmt.Sprintf("the request's %s is in API group %q, the stored one in %q", what, sent.GroupVersionKind().Group, stored.GroupVersionKind().Group)), false
	case sent.GroupVersionKind().Version == stored.GroupVersionKind().Version && !equality.Semantic.DeepEqual(specOf(sent), specOf(stored)):
		return nil, mismatch(mkey, fmt.Sprintf("the request's %s %s differs from the stored one in spec fields %s", what, ref.Name,
			strings.Join(mapDiff(specOf(sent), specOf(stored)), ", "))), false
	}
	// Another version of the same object (a conversion) is not compared field by
	// field: the stored object is what the plan is built from either way.
	return stored, Outcome{}, true
}

// getReferenced reads a contract-versioned reference as unstructured, in the version
// the API server prefers for its group and kind.
func (c *Coordinator) getReferenced(ctx context.Context, namespace string, ref clusterv1.ContractVersionedObjectReference) (*unstructured.Unstructured, error) {
	mapping, err := c.opts.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return nil, fmt.Errorf("map kind %s.%s: %w", ref.Kind, ref.APIGroup, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := c.opts.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

func specOf(u *unstructured.Unstructured) map[string]any {
	m, _ := u.Object["spec"].(map[string]any)
	if len(m) == 0 {
		return nil
	}
	return m
}

// specDiff names the top-level MachineSpec fields that differ (for the message).
func specDiff(a, b clusterv1.MachineSpec) []string {
	return mapDiff(toMap(a), toMap(b))
}

func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	return out
}

// mapDiff lists the keys whose values differ, sorted, as "spec.<key>".
func mapDiff(a, b map[string]any) []string {
	var out []string
	for k, v := range a {
		if !equality.Semantic.DeepEqual(v, b[k]) {
			out = append(out, "spec."+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "spec."+k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		// Equal after JSON, different in Go (e.g. nil vs empty): still a difference.
		out = []string{"spec"}
	}
	return out
}

func mismatch(machine client.ObjectKey, what string) Outcome {
	return rejected(fmt.Sprintf("the request disagrees with the stored Machine %s (%s): nothing was done", machine, what))
}
