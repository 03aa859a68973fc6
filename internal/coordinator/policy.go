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
	OSImageValue(obj *unstructured.Unstructured) (string, error)
}

var _ policyResolver = (*policy.Policy)(nil)

// OSImagesFromPolicy adapts the extension's policy to OSImageResolver (and to
// osImageChangeJudge).
//
// An infrastructure kind the policy does not know, an object without an image field,
// or an image that does not resolve to an artifact all mean "the OS image is not
// under our management" for ResolveOSImage. That is only true of an image that did
// not change: on the hook path the infrastructure machine is the stored one and
// CanUpdateMachine's planner covers an image change only when it resolves (otherwise
// CAPI replaces the Machine instead of calling UpdateMachine). The in-process entry
// (UpdateNode) updates a node to objects not stored yet, so it first asks
// UnmappedOSImageChange, which compares the desired image with the stored one and
// refuses a change the policy does not map (CauseOSImageUnmapped): that change
// would otherwise become "no OS change" and the Machine would claim an OS its node
// never got.
func OSImagesFromPolicy(p policyResolver) OSImageResolver { return policyOSImages{p: p} }

type policyOSImages struct{ p policyResolver }

// CauseOSImageUnmapped: the desired infrastructure machine asks for another OS image
// than the stored one, and the policy maps it to no artifact (or no backend), so the
// node cannot be switched to it in place. Final until the spec or the policy changes.
const CauseOSImageUnmapped Cause = "OSImageUnmapped"

// osImageChangeJudge is the optional part of an OSImageResolver that judges an image
// change between the stored and the desired infrastructure machine.
type osImageChangeJudge interface {
	// UnmappedOSImageChange returns why the change from current to desired cannot be
	// applied in place, "" when the image does not change or resolves.
	UnmappedOSImageChange(current, desired *unstructured.Unstructured) (string, error)
}

var _ osImageChangeJudge = policyOSImages{}

func (r policyOSImages) UnmappedOSImageChange(current, desired *unstructured.Unstructured) (string, error) {
	if current == nil || desired == nil {
		return "", nil
	}
	_, _, err := r.p.ResolveOSImage(desired)
	if !errors.Is(err, policy.ErrUnresolvable) {
		return "", nil // resolves, or is not under our management at all
	}
	from, ferr := r.p.OSImageValue(current)
	to, terr := r.p.OSImageValue(desired)
	if e := errors.Join(ferr, terr); e != nil {
		return "", e
	}
	if from == to {
		return "", nil
	}
	return fmt.Sprintf("%s %s changes its OS image from %s to %s, which cannot be applied in place: %v", desired.GetKind(), desired.GetName(), from, to, err), nil
}

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
		Force:           d.Force,
	}
}

// BinariesResolver returns the kubeadm and kubelet a node platform ("linux/amd64")
// downloads for a Kubernetes version: nil and no error when none are listed for the
// version (the OS image must bring them). *policy.Policy implements it.
type BinariesResolver interface {
	KubernetesBinaries(version, platform string) (*protocol.KubernetesBinaries, error)
}

var _ BinariesResolver = (*policy.Policy)(nil)

// PreflightResolver returns the policy's kubeadm settings (*policy.Policy): the
// preflight checks a Machine's kubeadm commands skip, from its namespace and
// labels, and the etcd restore choice on rollback.
type PreflightResolver interface {
	IgnorePreflightErrors(namespace string, machineLabels map[string]string) []string
	EtcdRestore() protocol.EtcdRestore
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
var _ CELGatesResolver = (*policy.Policy)(nil)

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
