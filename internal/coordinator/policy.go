package coordinator

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// policyResolver is the part of *policy.Policy the coordinator uses.
type policyResolver interface {
	ResolveOSImage(obj *unstructured.Unstructured) (*protocol.OSImage, bool, error)
}

var _ policyResolver = (*policy.Policy)(nil)

// OSImagesFromPolicy adapts the extension's policy to OSImageResolver.
//
// An infrastructure kind the policy does not know, an object without an image field,
// or an image that does not resolve to an artifact all mean "the OS image is not
// under our management": the planner covers an image change only when it resolves,
// so an unresolvable image is one that did not change (otherwise CAPI would have
// replaced the Machine instead of calling UpdateMachine).
func OSImagesFromPolicy(p policyResolver) OSImageResolver { return policyOSImages{p: p} }

type policyOSImages struct{ p policyResolver }

func (r policyOSImages) ResolveOSImage(infra *unstructured.Unstructured) (*protocol.OSImage, error) {
	img, present, err := r.p.ResolveOSImage(infra)
	switch {
	case errors.Is(err, policy.ErrUnknownKind), errors.Is(err, policy.ErrUnresolvable):
		return nil, nil
	case err != nil:
		return nil, err
	case !present:
		return nil, nil
	}
	return img, nil
}

// DrainOptionsFromPolicy maps the policy's drain section to DrainOptions.
func DrainOptionsFromPolicy(d policy.Drain) DrainOptions {
	return DrainOptions{
		Timeout:         time.Duration(d.TimeoutSeconds) * time.Second,
		EvictSingleNode: !d.SkipOnSingleNode,
	}
}

// BinariesResolver returns the kubeadm and kubelet a node platform ("linux/amd64")
// downloads for a Kubernetes version: nil and no error when none are listed for the
// version (the OS image must bring them). *policy.Policy implements it.
type BinariesResolver interface {
	KubernetesBinaries(version, platform string) (*protocol.KubernetesBinaries, error)
}

var _ BinariesResolver = (*policy.Policy)(nil)

// PreflightResolver returns the kubeadm preflight checks a Machine's kubeadm
// commands skip, from its namespace and labels (*policy.Policy).
type PreflightResolver interface {
	IgnorePreflightErrors(namespace string, machineLabels map[string]string) []string
}

var _ PreflightResolver = (*policy.Policy)(nil)

// kubernetesBinaries resolves the binaries of the Machine's desired version for
// its Node's platform (Node.status.nodeInfo), so that the plan carries the one
// URL and digest per binary the node needs. A Machine without a version plans
// none. A version listed without the node's platform is an input error: the
// update cannot proceed the way the policy declares it.
func kubernetesBinaries(r BinariesResolver, m *clusterv1.Machine, node *corev1.Node) (*protocol.KubernetesBinaries, error) {
	if r == nil || m.Spec.Version == "" {
		return nil, nil
	}
	info := node.Status.NodeInfo
	b, err := r.KubernetesBinaries(m.Spec.Version, info.OperatingSystem+"/"+info.Architecture)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeadm and kubelet %s for node %s: %w", nodeplan.ErrInput, m.Spec.Version, node.Name, err)
	}
	return b, nil
}

// GatesResolver returns the user-defined health gates of a Machine's pools, by
// the Machine's namespace and labels, in the order they run. *policy.Policy
// implements it.
type GatesResolver interface {
	Gates(namespace string, machineLabels map[string]string) ([]protocol.Gate, error)
}

var _ GatesResolver = (*policy.Policy)(nil)

// userGates resolves the gates the Machine's plan carries. Pools whose gates
// clash for this Machine are an input error: the operator must say which one runs.
func userGates(r GatesResolver, m *clusterv1.Machine) ([]protocol.Gate, error) {
	if r == nil {
		return nil, nil
	}
	gates, err := r.Gates(m.Namespace, m.Labels)
	if err != nil {
		return nil, fmt.Errorf("%w: health gates of machine %s/%s: %w", nodeplan.ErrInput, m.Namespace, m.Name, err)
	}
	return gates, nil
}
