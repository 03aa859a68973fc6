package policy

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// clusterNameLabel is CAPI's label naming a machine's cluster.
const clusterNameLabel = "cluster.x-k8s.io/cluster-name"

// ErrUnknownKind is returned by ResolveOSImage for an infrastructure kind the
// policy has no entry for.
var ErrUnknownKind = errors.New("infrastructure kind not in the policy")

// ErrUnresolvable is returned by ResolveOSImage when the object carries an image
// that cannot be installed on a node (see OSImageFor).
var ErrUnresolvable = errors.New("image cannot be resolved to an OS artifact")

// ResolveOSImage returns the OS image an infrastructure machine (or machine
// template) asks for.
//
//   - imageFieldPresent is false, with a nil image and error, when the kind has no
//     image path or the object does not set its key image path: the OS image is
//     not managed through this object.
//   - An unknown kind returns ErrUnknownKind; an image that is set but not mapped
//     to an artifact with a digest and backend returns ErrUnresolvable. The planner
//     covers an image change only when it resolves, so for a machine whose image
//     change was covered this never fails; for a machine whose image never changed
//     it tells the coordinator that the image is not under our management.
func (p *Policy) ResolveOSImage(obj *unstructured.Unstructured) (*protocol.OSImage, bool, error) {
	entry, value, err := p.osImageValue(obj)
	if err != nil || value == nil {
		return nil, false, err
	}
	img, reason := p.OSImageFor(entry.Kind, value, obj.GetNamespace(), obj.GetLabels()[clusterNameLabel])
	if img == nil {
		return nil, true, fmt.Errorf("resolve OS image of %s %s: %s: %w", obj.GetKind(), obj.GetName(), reason, ErrUnresolvable)
	}
	return img, true, nil
}

// OSImageValue returns the canonical value of an infrastructure machine's key image
// field (CanonicalImage), "" when the kind has no image path or the object does not
// set it; an unknown kind returns ErrUnknownKind. Two objects whose values differ ask
// for different OS images, whether or not the policy maps either.
func (p *Policy) OSImageValue(obj *unstructured.Unstructured) (string, error) {
	_, value, err := p.osImageValue(obj)
	if err != nil || value == nil {
		return "", err
	}
	s, err := CanonicalImage(value)
	if err != nil {
		return "", fmt.Errorf("OS image of %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return s, nil
}

// osImageValue reads the key image field of obj (nil value when the kind has no
// image path or the object does not set it).
func (p *Policy) osImageValue(obj *unstructured.Unstructured) (InfraKind, any, error) {
	if obj == nil {
		return InfraKind{}, nil, errors.New("resolve OS image: object is nil")
	}
	gvk := obj.GroupVersionKind()
	entry, template, ok := p.InfraKindFor(gvk.Group, gvk.Kind)
	if !ok {
		return InfraKind{}, nil, fmt.Errorf("resolve OS image of %s %s: %w", gvk.Kind, obj.GetName(), ErrUnknownKind)
	}
	if len(entry.ImagePaths) == 0 {
		return entry, nil, nil
	}
	path := append([]string{"spec"}, entry.ImagePaths[0]...)
	if template {
		path = append([]string{"spec", "template", "spec"}, entry.ImagePaths[0]...)
	}
	value, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
	if err != nil {
		return InfraKind{}, nil, fmt.Errorf("resolve OS image of %s %s: read %s: %w", gvk.Kind, obj.GetName(), strings.Join(path, "."), err)
	}
	if !found {
		return entry, nil, nil
	}
	return entry, value, nil
}
