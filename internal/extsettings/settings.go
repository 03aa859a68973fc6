package extsettings

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reader reads the hooks' settings: Defaults, overlaid by the spec.settings of the
// ExtensionConfig named Name, read on every call (through Client, a cache in the
// binary) so that a change of the ExtensionConfig takes effect as it does for the
// hooks. No Name, or an ExtensionConfig that does not exist, adds nothing.
type Reader struct {
	Client   client.Reader
	Name     string
	Defaults map[string]string
}

// Settings returns a fresh map (nil when there are none) the caller may change.
func (r Reader) Settings(ctx context.Context) (map[string]string, error) {
	out := maps.Clone(r.Defaults)
	if r.Name == "" || r.Client == nil {
		return out, nil
	}
	// Unstructured, so that the caller's scheme need not know the runtime types.
	ec := &unstructured.Unstructured{}
	ec.SetAPIVersion("runtime.cluster.x-k8s.io/v1beta2")
	ec.SetKind("ExtensionConfig")
	err := r.Client.Get(ctx, client.ObjectKey{Name: r.Name}, ec)
	switch {
	case apierrors.IsNotFound(err):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("read ExtensionConfig %s for its settings: %w", r.Name, err)
	}
	set, _, err := unstructured.NestedStringMap(ec.Object, "spec", "settings")
	if err != nil {
		return nil, fmt.Errorf("ExtensionConfig %s: spec.settings: %w", r.Name, err)
	}
	if len(set) == 0 {
		return out, nil
	}
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, set)
	return out, nil
}
