package coordinator

import (
	"container/list"
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/secretbudget"
)

// SecretCache reads management Secrets without holding every Secret of the management
// cluster in memory: which Secrets exist, and at which resourceVersion, comes from a
// metadata-only informer (Meta reads metav1.PartialObjectMetadata of kind Secret), and
// the bodies of the Secrets the coordinator read (kubeconfigs, file contents) from a
// map keyed by resourceVersion, filled by one live GET per change and bounded in
// bytes (secretbudget.Bytes of each body; the least recently used go first), because a
// namespace editor decides how large the Secrets are that a KubeadmConfig
// references. A Secret the metadata cache does not know (not synced, just created)
// is read live. Secrets of any other type than *corev1.Secret, and lists, are read
// live.
//
// A body is as fresh as the metadata informer: at most a watch event behind, which
// a call that reads from caches may be (see Caches).
type SecretCache struct {
	meta     client.Reader
	live     client.Reader
	maxBytes int64

	mu     sync.Mutex
	bodies map[client.ObjectKey]*list.Element // of cachedSecret, most recent first
	order  *list.List
	bytes  int64
}

type cachedSecret struct {
	sec   *corev1.Secret
	bytes int64
}

// DefaultSecretCacheBytes bounds the Secret bodies a SecretCache holds by default:
// the kubeconfigs of hundreds of workload clusters (a few KiB each) and the file
// Secrets of the updates in flight, a small part of the extension's 256Mi.
const DefaultSecretCacheBytes int64 = 16 << 20

// NewSecretCache returns a SecretCache holding at most maxBytes of Secret bodies
// (secretbudget.Bytes); maxBytes <= 0 means DefaultSecretCacheBytes. A Secret larger than
// the whole bound is read live every time.
func NewSecretCache(meta, live client.Reader, maxBytes int64) *SecretCache {
	if maxBytes <= 0 {
		maxBytes = DefaultSecretCacheBytes
	}
	return &SecretCache{meta: meta, live: live, maxBytes: maxBytes, bodies: map[client.ObjectKey]*list.Element{}, order: list.New()}
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
	kept := sec.DeepCopy()
	kept.ManagedFields = nil // no reader of a Secret body needs them
	s.store(key, kept)
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

// Bytes is what the bodies held cost (secretbudget.Bytes), at most the cache's bound.
func (s *SecretCache) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

func (s *SecretCache) lookup(key client.ObjectKey, rv string) *corev1.Secret {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.bodies[key]
	if !ok {
		return nil
	}
	sec := e.Value.(*cachedSecret).sec
	if rv == "" || sec.ResourceVersion != rv {
		return nil
	}
	s.order.MoveToFront(e)
	return sec
}

func (s *SecretCache) store(key client.ObjectKey, sec *corev1.Secret) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(key)
	size := secretbudget.Bytes(sec)
	if size > s.maxBytes {
		return
	}
	s.bodies[key] = s.order.PushFront(&cachedSecret{sec: sec, bytes: size})
	s.bytes += size
	for s.bytes > s.maxBytes {
		s.remove(client.ObjectKeyFromObject(s.order.Back().Value.(*cachedSecret).sec))
	}
}

func (s *SecretCache) drop(key client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(key)
}

// remove forgets key's body; s.mu is held.
func (s *SecretCache) remove(key client.ObjectKey) {
	if e, ok := s.bodies[key]; ok {
		delete(s.bodies, key)
		s.order.Remove(e)
		s.bytes -= e.Value.(*cachedSecret).bytes
	}
}
