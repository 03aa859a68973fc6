package agentinstall

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything we install.
const FieldManager = "capi-inplace"

// Ensure installs or upgrades the agent in the workload cluster behind c. It costs one
// GET when the installed DaemonSet already carries the current manifest hash, and
// reports whether it applied anything.
func Ensure(ctx context.Context, c client.Client, cfg Config) (bool, error) {
	objs, err := Objects(cfg)
	if err != nil {
		return false, err
	}
	want := objs[len(objs)-1].GetAnnotations()[ManifestHashAnnotation]

	ds := &appsv1.DaemonSet{}
	err = c.Get(ctx, client.ObjectKey{Namespace: inplacev1.AgentNamespace, Name: AgentName}, ds)
	switch {
	case err == nil && ds.Annotations[ManifestHashAnnotation] == want:
		return false, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, fmt.Errorf("get agent daemonset: %w", err)
	}
	if err := apply(ctx, c, objs); err != nil {
		return false, err
	}
	return true, nil
}

func apply(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, o := range objs {
		u, err := toUnstructured(o)
		if err != nil {
			return err
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// toUnstructured drops what a typed object always serialises but must not be applied:
// an empty status and a null creation timestamp.
func toUnstructured(o client.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", o, err)
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	if spec, ok := m["spec"].(map[string]any); ok {
		if tpl, ok := spec["template"].(map[string]any); ok {
			if md, ok := tpl["metadata"].(map[string]any); ok {
				delete(md, "creationTimestamp")
			}
		}
	}
	return &unstructured.Unstructured{Object: m}, nil
}
