package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of capi-inplace's API types (FleetRollout),
// served from the CustomResourceDefinitions in config/crd that `make generate`
// writes from them. The node protocol's Version is versioned on its own.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// AddToScheme adds capi-inplace's API types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &FleetRollout{}, &FleetRolloutList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
