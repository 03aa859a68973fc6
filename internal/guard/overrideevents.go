package guard

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// Bounds of the override Events waiting for their write to be stored.
const (
	maxPendingOverrideEvents = 64
	maxRecordedOverrides     = 4096
)

// overrideEventDelays space the reads that look for the stored write.
var overrideEventDelays = []time.Duration{time.Second, 3 * time.Second, 10 * time.Second}

// overrideEvents records the InPlaceGuardOverridden Event of an override. The
// admission port is open to every pod (config/default's NetworkPolicy cannot tell
// the API server from a pod), so an AdmissionReview, with its user name, may come
// from anyone. An Event is recorded only once the API server stored the change the
// override admitted (the object at a new resourceVersion, with the written spec),
// and once per write (object, override and the resourceVersion it was written
// over): the API server's own request precedes any copy of it, which can only be
// made once the write is visible.
type overrideEvents struct {
	reader   client.Reader
	recorder EventRecorder

	mu       sync.Mutex
	pending  int
	recorded map[string]bool
}

// overrideClaim is one admitted override waiting for its write to be stored.
type overrideClaim struct {
	old, written *unstructured.Unstructured
	value        string
	note         string
}

func (c overrideClaim) key() string {
	return string(c.written.GetUID()) + "/" + c.value + "/" + c.old.GetResourceVersion()
}

// stored reports whether obj is the claimed write, stored.
func (c overrideClaim) stored(obj *unstructured.Unstructured) bool {
	return obj.GetUID() == c.written.GetUID() && obj.GetResourceVersion() != c.old.GetResourceVersion() &&
		!specChanged(c.written.GetKind(), obj, c.written)
}

// claim records c's Event once its write is stored, or drops it.
func (o *overrideEvents) claim(c overrideClaim) {
	o.mu.Lock()
	full := o.pending >= maxPendingOverrideEvents
	if !full {
		o.pending++
	}
	o.mu.Unlock()
	if !full {
		o.check(c, 0)
	}
}

func (o *overrideEvents) check(c overrideClaim, attempt int) {
	time.AfterFunc(overrideEventDelays[attempt], func() {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(c.written.GroupVersionKind())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := o.reader.Get(ctx, client.ObjectKeyFromObject(c.written), obj)
		cancel()
		switch {
		case err == nil && c.stored(obj):
			o.record(c, obj)
		case attempt+1 < len(overrideEventDelays) && !apierrors.IsNotFound(err):
			o.check(c, attempt+1)
			return
		}
		o.mu.Lock()
		o.pending--
		o.mu.Unlock()
	})
}

func (o *overrideEvents) record(c overrideClaim, obj *unstructured.Unstructured) {
	o.mu.Lock()
	if o.recorded == nil || len(o.recorded) >= maxRecordedOverrides {
		o.recorded = map[string]bool{}
	}
	first := !o.recorded[c.key()]
	o.recorded[c.key()] = true
	o.mu.Unlock()
	if first {
		o.recorder.Eventf(obj, nil, corev1.EventTypeWarning, inplacev1.EventGuardOverridden, "AllowReplace", "%s", c.note)
	}
}
