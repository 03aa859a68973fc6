package agent

import (
	"context"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// lister is the List and Watch of a typed client (Nodes(), Secrets(ns)).
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// byName lists and watches one object by name with the field selector
// metadata.name, which RBAC's resourceNames honour for list and watch, so the
// agent needs no access to any other object. Some API servers do not implement
// field selectors (Cluster API's in-memory workload clusters answer a list with an
// internal error, and a watch with a stream that ends at once): then the list
// falls back to no selector, keeping only the named object, and the watch to no
// selector too; its extra events only cost a cheap reconcile.
//
// It also opts out of client-go's streaming lists (WatchListClient, on by default
// since 1.35): a server that ignores sendInitialEvents never ends the initial
// stream, and for one object a plain list costs nothing.
func byName[L runtime.Object](c lister[L], name string) cache.ListerWatcher {
	sel := "metadata.name=" + name
	var unsupported atomic.Bool
	return plainListWatch{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if !unsupported.Load() {
				o.FieldSelector = sel
				l, err := c.List(ctx, o)
				if err == nil || !fieldSelectorUnsupported(err) {
					return l, err
				}
				unsupported.Store(true)
			}
			o.FieldSelector = ""
			l, err := c.List(ctx, o)
			if err != nil {
				return l, err
			}
			items, err := meta.ExtractList(l)
			if err != nil {
				return l, err
			}
			kept := items[:0]
			for _, it := range items {
				if m, err := meta.Accessor(it); err == nil && m.GetName() == name {
					kept = append(kept, it)
				}
			}
			return l, meta.SetList(l, kept)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			// The reflector always lists before it watches, so the list has
			// found out whether the server takes field selectors.
			if !unsupported.Load() {
				o.FieldSelector = sel
			}
			return c.Watch(ctx, o)
		},
	}}
}

// plainListWatch is a ListWatch that asks reflectors for list-then-watch.
type plainListWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported is what client-go's reflector looks for.
func (plainListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func fieldSelectorUnsupported(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "field selector")
}
