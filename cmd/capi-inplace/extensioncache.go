package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator"
)

// managerCacheOptions scope what the manager's informers hold, so that the
// extension's memory follows the objects it works on, not the management cluster:
// no managed fields anywhere, and of Secrets only their metadata without annotations
// (the coordinator watches Secrets metadata-only and reads the few bodies it needs
// by resourceVersion, coordinator.SecretCache; kubectl's last-applied annotation
// would carry a Secret's data).
func managerCacheOptions() cache.Options {
	return cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Transform: stripSecret},
		},
	}
}

// stripSecret keeps a Secret's identity, labels and resourceVersion, whatever form
// (typed or metadata-only) its informer holds.
func stripSecret(in any) (any, error) {
	if s, ok := in.(*corev1.Secret); ok {
		s.Data, s.StringData = nil, nil
	}
	if o, err := meta.Accessor(in); err == nil {
		o.SetManagedFields(nil)
		o.SetAnnotations(nil)
	}
	return in, nil
}

// coordinatorCaches are the informer-backed sources of the coordinator's
// steady-state calls (coordinator.Caches), over the manager's cache.
func coordinatorCaches(c cache.Cache, live client.Reader, scheme *runtime.Scheme) (*coordinator.Caches, *coordinator.SecretCache) {
	informers := coordinator.SyncedReader{Cache: c}
	secrets := coordinator.NewSecretCache(informers, live, 0)
	return &coordinator.Caches{
		Management: informers,
		Secrets:    secrets,
		Workloads:  coordinator.NewInformerWorkloadCaches(scheme, coordinator.WorkloadCacheOptions{}),
	}, secrets
}
