package fleetrollout

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/fleet/rollout"
)

// start writes target where the Cluster asks for its version: spec.topology.version,
// or its KubeadmControlPlane's spec.version (its MachineDeployments follow, advance).
func start(ctx context.Context, c client.Writer, o clusterObjects, target string) rollout.Result {
	res := rollout.Result{Key: rollout.Key{Namespace: o.Cluster.Namespace, Name: o.Cluster.Name}}
	var err error
	if o.topology() {
		orig := o.Cluster.DeepCopy()
		o.Cluster.Spec.Topology.Version = target
		err = c.Patch(ctx, o.Cluster, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	} else {
		orig := o.ControlPlane.DeepCopy()
		o.ControlPlane.Spec.Version = target
		err = c.Patch(ctx, o.ControlPlane, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
	res.Outcome, res.Reason, res.Message = classify(err)
	return res
}

// advance writes target to the MachineDeployments of a plain Cluster whose
// control plane reached it, one write each. It returns a Refused result when a
// write is refused for good; other failures are tried again on the next pass.
func advance(ctx context.Context, c client.Writer, o clusterObjects, target string) (*rollout.Result, error) {
	if o.topology() || o.ControlPlane == nil || !sameVersion(o.ControlPlane.Spec.Version, target) || !controlPlaneReached(o, target) {
		return nil, nil
	}
	var errs []error
	for i := range o.MachineDeployments {
		md := &o.MachineDeployments[i]
		if sameVersion(md.Spec.Template.Spec.Version, target) {
			continue
		}
		orig := md.DeepCopy()
		md.Spec.Template.Spec.Version = target
		err := c.Patch(ctx, md, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		outcome, reason, msg := classify(err)
		switch outcome {
		case rollout.Refused:
			return &rollout.Result{Key: rollout.Key{Namespace: o.Cluster.Namespace, Name: o.Cluster.Name}, Outcome: rollout.Refused, Reason: reason,
				Message: fmt.Sprintf("control plane at %s; MachineDeployment %s: %s", target, md.Name, msg)}, nil
		case rollout.NotWritten:
			errs = append(errs, fmt.Errorf("MachineDeployment %s/%s: %w", md.Namespace, md.Name, err))
		}
	}
	return nil, errors.Join(errs...)
}

// classify turns a write's error into the core's outcome. An admission webhook's
// refusal (403 without the details the authorizer's carries: the in-place guard's
// admission.Denied) and a validation error are final; anything else may pass.
func classify(err error) (rollout.Outcome, string, string) {
	if err == nil {
		return rollout.Written, "", ""
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		switch {
		case apierrors.IsForbidden(err) && s.Details == nil:
			return rollout.Refused, inplacev1.FleetReasonWouldReplace, s.Message
		case apierrors.IsInvalid(err):
			return rollout.Refused, inplacev1.FleetReasonWriteInvalid, s.Message
		}
	}
	return rollout.NotWritten, "", ""
}
