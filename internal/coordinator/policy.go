package coordinator

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
