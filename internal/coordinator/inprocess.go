package coordinator

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DesiredNode is what the single-node control-plane controller asks a node to become:
// the desired Machine (its name and namespace say which Machine; its spec is the
// target) and the desired KubeadmConfig and infrastructure machine as the API will
// store them once aligned. Typed objects, never a hook request: nothing goes through
// JSON on the way in, and nothing but the Outcome on the way out.
type DesiredNode struct {
	Machine               *clusterv1.Machine
	BootstrapConfig       *unstructured.Unstructured
	InfrastructureMachine *unstructured.Unstructured
}

// UpdateNode is the in-process entry of the single-node control-plane controller,
// which computes the desired objects itself from the stored KubeadmControlPlane and
// updates the node before it aligns the stored objects (the hook's check against the
// stored objects would refuse that): the Machine's identity, labels, node and cluster
// are still read from the API, but its desired spec, bootstrap config and
// infrastructure machine are taken from d. It answers the typed Outcome, on which the
// caller decides (Kind and Cause; Message is for humans). Never serve it to the network.
func (c *Coordinator) UpdateNode(ctx context.Context, d DesiredNode) Outcome {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	if d.Machine == nil || d.Machine.Name == "" || d.Machine.Namespace == "" {
		return rejected("the request names no Machine")
	}
	ctx = c.withMachineLogger(ctx, d.Machine)
	// The same namespace opt-in as the hooks: the caller's own check is not the only one.
	if out, ok := c.checkOptedIn(ctx, d.Machine.Namespace); !ok {
		logOutcome(ctx, out)
		return out
	}
	stored, out, ok := c.readMachine(ctx, client.ObjectKeyFromObject(d.Machine))
	if !ok {
		return out
	}
	desired := stored.DeepCopy()
	desired.Spec = *d.Machine.Spec.DeepCopy()
	desired.Spec.ClusterName = stored.Spec.ClusterName
	objs := desiredObjects{stored: stored, machine: desired}
	if d.BootstrapConfig != nil {
		objs.bootstrap = d.BootstrapConfig.DeepCopy()
	}
	if d.InfrastructureMachine != nil {
		objs.infra = d.InfrastructureMachine.DeepCopy()
	}
	if out, ok := c.checkOSImageChange(ctx, stored, objs.infra); !ok {
		logOutcome(ctx, out)
		return out
	}
	out = c.lingerUpdate(ctx, objs)
	logOutcome(ctx, out)
	return out
}

// Known reports whether k is one of the four outcome kinds; a caller treats any
// other value (a zero Outcome) as neither done nor failed.
func (k OutcomeKind) Known() bool {
	switch k {
	case OutcomeInProgress, OutcomeDone, OutcomeFailedFinal, OutcomeFailedRetryable:
		return true
	}
	return false
}

// checkOSImageChange refuses, before anything is touched, a desired infrastructure
// machine whose OS image differs from the stored one's and does not resolve
// (policy.go: the plan would otherwise carry no OS change). Only this entry needs it:
// on the hook path the infrastructure machine is the stored one.
func (c *Coordinator) checkOSImageChange(ctx context.Context, stored *clusterv1.Machine, desired *unstructured.Unstructured) (Outcome, bool) {
	judge, ok := c.opts.OSImages.(osImageChangeJudge)
	ref := stored.Spec.InfrastructureRef
	if !ok || desired == nil || !ref.IsDefined() {
		return Outcome{}, true
	}
	current := &unstructured.Unstructured{}
	current.SetGroupVersionKind(schema.GroupVersionKind{Group: ref.APIGroup, Version: desired.GroupVersionKind().Version, Kind: ref.Kind})
	key := client.ObjectKey{Namespace: stored.Namespace, Name: ref.Name}
	if err := c.opts.Client.Get(ctx, key, current); err != nil {
		return retryable(CauseManagementAPI, fmt.Sprintf("read %s %s of Machine %s: %v", ref.Kind, key, stored.Name, err)), false
	}
	why, err := judge.UnmappedOSImageChange(current, desired)
	switch {
	case err != nil:
		return retryable(CauseInvalidInput, fmt.Sprintf("compare the OS image of Machine %s: %v", stored.Name, err)), false
	case why != "":
		return final(CauseOSImageUnmapped, why+"; nothing was touched"), false
	}
	return Outcome{}, true
}
