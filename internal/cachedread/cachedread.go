// Package cachedread reads through controller-runtime's informer cache only where
// the informer of the object's kind has synced, so that a read never waits for a
// cache: the first read of a kind starts its informer, whose initial list can take
// longer than a caller may wait (an admission webhook must answer within the API
// server's timeout; a hook call within Cluster API's).
package cachedread

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Synced reports whether c's informer of obj's kind has synced, starting that
// informer, without waiting for it, when it has not started. An informer that
// cannot be had (a kind the API server does not serve) has not synced.
func Synced(ctx context.Context, c cache.Cache, obj client.Object) bool {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	return err == nil && inf.HasSynced()
}

// ListSynced is Synced for the item kind of list.
func ListSynced(ctx context.Context, c cache.Cache, list client.ObjectList) bool {
	item, err := ListItem(list)
	return err == nil && Synced(ctx, c, item)
}

// ListItem is a new object of the kind a list holds: *T for a typed list of
// Items []T, an Unstructured of the list's kind without "List" for an
// UnstructuredList.
func ListItem(list client.ObjectList) (client.Object, error) {
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		gvk := u.GroupVersionKind()
		kind, ok := strings.CutSuffix(gvk.Kind, "List")
		if !ok || kind == "" {
			return nil, fmt.Errorf("unstructured list of kind %q: not a list kind", gvk.Kind)
		}
		item := &unstructured.Unstructured{}
		item.SetGroupVersionKind(gvk.GroupVersion().WithKind(kind))
		return item, nil
	}
	items, err := meta.GetItemsPtr(list)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(items).Elem()
	if t.Kind() != reflect.Slice {
		return nil, fmt.Errorf("%T: items are not a slice", list)
	}
	obj, ok := reflect.New(t.Elem()).Interface().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T: items of %s are not objects", list, t.Elem())
	}
	return obj, nil
}

// OrLive reads from Cache where the informer of the kind has synced, and from
// Live otherwise (starting the informer for the reads after it).
type OrLive struct {
	Cache cache.Cache
	Live  client.Reader
}

var _ client.Reader = OrLive{}

// Get implements client.Reader.
func (r OrLive) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if Synced(ctx, r.Cache, obj) {
		return r.Cache.Get(ctx, key, obj, opts...)
	}
	return r.Live.Get(ctx, key, obj, opts...)
}

// List implements client.Reader.
func (r OrLive) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if ListSynced(ctx, r.Cache, list) {
		return r.Cache.List(ctx, list, opts...)
	}
	return r.Live.List(ctx, list, opts...)
}
