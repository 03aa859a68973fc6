package coordinator

import (
	"container/list"
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretCache reads management Secrets without holding every Secret of the management
// cluster in memory: which Secrets exist, and at which resourceVersion, comes from a
// metadata-only informer (Meta reads metav1.PartialObjectMetadata of kind Secret), and
// the bodies of the Secrets the coordinator read (kubeconfigs, file contents) from a
// map of at most Max entries keyed by resourceVersion, filled by one live GET per
// change. A Secret the metadata cache does not know (not synced, just created) is
// read live. Secrets of any other type than *corev1.Secret, and lists, are read live.
//
// A body is as fresh as the metadata informer: at most a watch event behind, which
// a call that reads from caches may be (see Caches).
type SecretCache struct {
	meta client.Reader
	live client.Reader
	max  int

	mu     sync.Mutex
	bodies map[client.ObjectKey]*list.Element // of *corev1.Secret, most recent first
	order  *list.List
}

// NewSecretCache returns a SecretCache; max <= 0 means 1024 bodies.
func NewSecretCache(meta, live client.Reader, max int) *SecretCache {
	if max <= 0 {
		max = 1024
	}
	return &SecretCache{meta: meta, live: live, max: max, bodies: map[client.ObjectKey]*list.Element{}, order: list.New()}
}

// Get implements client.Reader.
func (s *SecretCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return s.live.Get(ctx, key, obj, opts...)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.meta.Get(ctx, key, m); err == nil {
		if body := s.lookup(key, m.ResourceVersion); body != nil {
			body.DeepCopyInto(sec)
			return nil
		}
	}
	if err := s.live.Get(ctx, key, sec, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			s.drop(key)
		}
		return err
	}
	s.store(key, sec.DeepCopy())
	return nil
}

// List implements client.Reader (live).
func (s *SecretCache) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	return s.live.List(ctx, l, opts...)
}

// Len is the number of bodies held.
func (s *SecretCache) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

func (s *SecretCache) lookup(key client.ObjectKey, rv string) *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.bodies[key]
	if !ok {
		return nil
	}
	sec := e.Value.(*corev1.Secret)
	if rv == "" || sec.ResourceVersion != rv {
		return nil
	}
	s.order.MoveToFront(e)
	return sec
}

func (s *SecretCache) store(key client.ObjectKey, sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.bodies[key]; ok {
		e.Value = sec
		s.order.MoveToFront(e)
		return
	}
	s.bodies[key] = s.order.PushFront(sec)
	for s.order.Len() > s.max {
		last := s.order.Back()
		old := last.Value.(*corev1.Secret)
		delete(s.bodies, client.ObjectKeyFromObject(old))
		s.order.Remove(last)
	}
}

func (s *SecretCache) drop(key client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.bodies[key]; ok {
		delete(s.bodies, key)
		s.order.Remove(e)
	}
}
