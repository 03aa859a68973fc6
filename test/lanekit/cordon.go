package lanekit

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CordonWatch records when a Node was cordoned and uncordoned, polled every 500 ms.
type CordonWatch struct {
	mu                   sync.Mutex
	cordoned, uncordoned time.Time
	stop, finished       chan struct{}
}

// WatchCordon starts watching node's spec.unschedulable.
func WatchCordon(cs kubernetes.Interface, node string) *CordonWatch {
	return WatchCordonThen(cs, node, nil)
}

// WatchCordonThen is WatchCordon that runs onCordon (in the watch, before the next
// poll) when it first sees the node cordoned, with the Node as seen then.
func WatchCordonThen(cs kubernetes.Interface, node string, onCordon func(*corev1.Node)) *CordonWatch {
	w := &CordonWatch{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			cancel()
			if err == nil {
				now := time.Now()
				w.mu.Lock()
				switch {
				case n.Spec.Unschedulable && w.cordoned.IsZero():
					w.cordoned = now
					if onCordon != nil {
						onCordon(n)
					}
				case !n.Spec.Unschedulable && !w.cordoned.IsZero() && w.uncordoned.IsZero():
					w.uncordoned = now
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// Stop ends the watch and returns the cordon-to-uncordon window (to now if the node
// is still cordoned; 0 if it never was).
func (w *CordonWatch) Stop() time.Duration {
	close(w.stop)
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cordoned.IsZero() {
		return 0
	}
	end := w.uncordoned
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(w.cordoned)
}

// Uncordoned is when the node was seen uncordoned after the cordon.
func (w *CordonWatch) Uncordoned() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.uncordoned
}
