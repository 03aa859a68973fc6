package singlenode

import (
	"context"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// settings returns the planner's settings: Settings, overlaid by the spec.settings of
// the ExtensionConfig named ExtensionConfigName (read on every decision, so that
// disableInPlaceUpdates set on it takes effect as it does for the hooks, to which
// Cluster API passes the same settings). A missing ExtensionConfig adds nothing.
func (r *Reconciler) settings(ctx context.Context) (map[string]string, error) {
	out := maps.Clone(r.Settings)
	if r.ExtensionConfigName == "" {
		return out, nil
	}
	ec := &unstructured.Unstructured{}
	ec.SetAPIVersion("runtime.cluster.x-k8s.io/v1beta2")
	ec.SetKind("ExtensionConfig")
	err := r.Client.Get(ctx, client.ObjectKey{Name: r.ExtensionConfigName}, ec)
	switch {
	case apierrors.IsNotFound(err):
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("read ExtensionConfig %s for its settings: %w", r.ExtensionConfigName, err)
	}
	set, _, err := unstructured.NestedStringMap(ec.Object, "spec", "settings")
	if err != nil {
		return nil, fmt.Errorf("ExtensionConfig %s: spec.settings: %w", r.ExtensionConfigName, err)
	}
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, set)
	return out, nil
}
