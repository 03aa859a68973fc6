package guard

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/capi-inplace/capi-inplace/internal/preview"
)

// Change returns the write as a change for preview.Apply: a JSON merge patch (RFC
// 7386) from the stored object to the written one, so that Apply, which merges
// changes the way `capi-inplace plan -f` does, ends at exactly the written object
// (fields the write drops become null and are deleted). apiVersion, kind, name and
// namespace are the written object's.
func Change(old, written *unstructured.Unstructured) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: preview.MergePatch(old.Object, written.Object)}
	u.SetAPIVersion(written.GetAPIVersion())
	u.SetKind(written.GetKind())
	u.SetName(written.GetName())
	u.SetNamespace(written.GetNamespace())
	return u
}

// specChanged reports whether a write changes anything that can make Cluster API
// roll a Machine out: the spec (a Cluster's spec.topology, since its other fields
// roll nothing out). Metadata, status and a Cluster's non-topology spec cannot.
func specChanged(kind string, old, written *unstructured.Unstructured) bool {
	path := []string{"spec"}
	if kind == "Cluster" {
		path = []string{"spec", "topology"}
	}
	o, _, _ := unstructured.NestedFieldNoCopy(old.Object, path...)
	n, _, _ := unstructured.NestedFieldNoCopy(written.Object, path...)
	return !reflect.DeepEqual(o, n)
}
