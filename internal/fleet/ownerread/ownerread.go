// Package ownerread reads the owner a fleet failure names (a MachineDeployment or
// the Cluster's control plane, fleet.OwnerOf) from the management API and keys its
// desired spec with fleet.OwnerSpecKey. The coordinator (whose budget it decides)
// and `capi-inplace status` (which shows that budget) read owners through it, so
// the two count the same failures.
//
// Imports: internal/fleet, Cluster API's core types, apimachinery, controller-runtime's client.
package ownerread

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/fleet"
)

// SpecKey reads the owner "Kind/name" of cluster, at the version mapper prefers, as
// unstructured (a control plane of any provider), and keys its desired spec
// (fleet.OwnerSpecKey). found is false when the owner is gone.
func SpecKey(ctx context.Context, r client.Reader, mapper meta.RESTMapper, cluster *clusterv1.Cluster, name string) (key string, found bool, err error) {
	kind, objName := fleet.SplitOwner(name)
	gk := schema.GroupKind{Group: clusterv1.GroupVersion.Group, Kind: kind}
	if kind != fleet.KindMachineDeployment {
		gk.Group = cluster.Spec.ControlPlaneRef.APIGroup
	}
	mapping, err := mapper.RESTMapping(gk)
	if err != nil {
		return "", false, fmt.Errorf("map kind %s: %w", kind, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: objName}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("read %s: %w", name, err)
	}
	spec, _ := u.Object["spec"].(map[string]any)
	if key, err = fleet.OwnerSpecKey(kind, spec); err != nil {
		return "", false, fmt.Errorf("%s: %w", name, err)
	}
	return key, true, nil
}
