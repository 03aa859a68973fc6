package coordinator

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
