package coordinator

import (
	"context"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// A node is NotReady for a while during an in-place update (kubelet restart, reboot,
// its own API server restarting). A MachineHealthCheck with a shorter timeout would
// replace the Machine: exactly what an in-place update exists to avoid. Upstream's
// MachineHealthCheck skips a Machine carrying cluster.x-k8s.io/skip-remediation
// (core/reconcilers/machinehealthcheck shouldSkipRemediation), so the coordinator
// sets it from before cordon until the update ends, and only then. It records
// ownership in RemediationHeldByAnnotation (set in the same patch, so a crash never
// leaves one without the other) and removes only what it set: an operator's
// skip-remediation stays.

// remediationHeldValue is the value of both annotations when the coordinator set them.
const remediationHeldValue = "capi-inplace"

// holdRemediation adds skip-remediation and our ownership marker to ann. It changes
// nothing when the marker is there (ours already, or the operator removed the
// skip-remediation during the update: their choice stands) or when skip-remediation
// is there without it (the operator's). It reports whether ann changed.
func holdRemediation(ann map[string]string) bool {
	if _, ours := ann[inplacev1.RemediationHeldByAnnotation]; ours {
		return false
	}
	if _, operators := ann[clusterv1.MachineSkipRemediationAnnotation]; operators {
		return false
	}
	ann[inplacev1.RemediationHeldByAnnotation] = remediationHeldValue
	ann[clusterv1.MachineSkipRemediationAnnotation] = remediationHeldValue
	return true
}

// releaseRemediation removes what holdRemediation added: the marker, and
// skip-remediation if it still has our value (an operator who set their own value
// during the update keeps it). It reports whether ann changed.
func releaseRemediation(ann map[string]string) bool {
	if _, ours := ann[inplacev1.RemediationHeldByAnnotation]; !ours {
		return false
	}
	delete(ann, inplacev1.RemediationHeldByAnnotation)
	if ann[clusterv1.MachineSkipRemediationAnnotation] == remediationHeldValue {
		delete(ann, clusterv1.MachineSkipRemediationAnnotation)
	}
	return true
}

// protectFromRemediation holds MachineHealthCheck remediation off the Machine of s
// when a MachineHealthCheck selects it (healthChecked): a Machine no
// MachineHealthCheck watches needs no hold, and skipping it saves a Machine write
// at both ends of every node's update (each wakes Cluster API's Machine, MachineSet
// and control-plane controllers). Called before the node is cordoned, and on every
// later call until the update ends, so a MachineHealthCheck created during the
// update (or not yet in the cache when the update started) gets the hold from the
// next call, seconds later: long before any health check's timeout of a node
// restarting in place.
func (c *Coordinator) protectFromRemediation(ctx context.Context, s *scope, step int) (Outcome, bool) {
	ann := maps.Clone(s.stored.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	if !holdRemediation(ann) {
		return Outcome{}, true // held already, or the operator's skip-remediation
	}
	watched, err := c.healthChecked(ctx, s.stored)
	switch {
	case err != nil && c.fromCache:
		return needsLive(), false
	case err != nil:
		return retryable(CauseManagementAPI, stepMsg(step, "%v", err)), false
	case !watched:
		return Outcome{}, true
	case c.fromCache:
		return needsLive(), false
	}
	if err := c.patchMachineAnnotations(ctx, s.stored, "hold remediation of", holdRemediation); err != nil {
		return retryable(CauseManagementAPI, stepMsg(step, "%v", err)), false
	}
	return Outcome{}, true
}

// healthChecked reports whether a MachineHealthCheck selects m, as upstream's
// MachineHealthCheck selects its targets (its selector plus the cluster-name label,
// in its namespace). MachineHealthChecks come from the manager's cache once its
// informer has synced, else from a live list (a cached view's Client reads the same
// cache, so it lists once). A selector that does not parse counts as selecting: the
// hold is the safe side.
func (c *Coordinator) healthChecked(ctx context.Context, m *clusterv1.Machine) (bool, error) {
	list := &clusterv1.MachineHealthCheckList{}
	err := errNotSynced
	if c.opts.Caches != nil && !c.fromCache {
		err = c.opts.Caches.Management.List(ctx, list, client.InNamespace(m.Namespace))
	}
	if err != nil {
		if err := c.opts.Client.List(ctx, list, client.InNamespace(m.Namespace)); err != nil {
			return false, fmt.Errorf("list the MachineHealthChecks of namespace %s: %w", m.Namespace, err)
		}
	}
	for i := range list.Items {
		mhc := &list.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(metav1.CloneSelectorAndAddLabel(&mhc.Spec.Selector, clusterv1.ClusterNameLabel, mhc.Spec.ClusterName))
		if err != nil || sel.Matches(labels.Set(m.Labels)) {
			return true, nil
		}
	}
	return false, nil
}

// liftRemediationHold lifts the hold once the update no longer owns the node: done,
// failed or rolled back (uncordoned), abandoned, or Degraded (nothing automatic
// repairs it any more; MachineHealthCheck acts as it would on any broken node, and an
// operator who wants to inspect the node first sets skip-remediation themselves).
// Called after the node patch, so a crash in between keeps the hold, never the
// reverse. A failed write answers in progress (no end is reported while the hold is
// on) and the next call retries.
func (c *Coordinator) liftRemediationHold(ctx context.Context, s *scope) (Outcome, bool) {
	if err := c.patchMachineAnnotations(ctx, s.stored, "release remediation of", releaseRemediation); err != nil {
		return inProgress(retryDrain, stepMsg(stepVerify, "%v", err)), false
	}
	return Outcome{}, true
}

// patchMachineAnnotations merge-patches the annotations mutate changes (a merge
// patch names only those keys, so annotations Cluster API writes concurrently stay).
func (c *Coordinator) patchMachineAnnotations(ctx context.Context, m *clusterv1.Machine, verb string, mutate func(map[string]string) bool) error {
	ann := maps.Clone(m.GetAnnotations())
	if ann == nil {
		ann = map[string]string{}
	}
	if !mutate(ann) {
		return nil
	}
	before := m.DeepCopy()
	m.SetAnnotations(ann)
	if err := c.opts.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil {
		*m = *before
		return fmt.Errorf("%s Machine %s: %w", verb, client.ObjectKeyFromObject(m), err)
	}
	return nil
}
