package lanekit

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Write is one ConfigMap the workload API server acknowledged: created, with
// the label the writer read just before it (e.g. the node agent's phase).
type Write struct {
	Name  string
	Label string
	At    time.Time
}

// Writer creates a ConfigMap in a workload cluster at a fixed interval, as an
// application would keep writing through an update, and records every create the
// API server acknowledged. A rollback that loses data shows as acknowledged
// writes that are gone afterwards.
type Writer struct {
	cs        kubernetes.Interface
	namespace string
	mu        sync.Mutex
	acked     []Write
	failed    int
	stop      chan struct{}
	finished  chan struct{}
}

// WriteEvery starts a Writer creating ConfigMaps named prefix-<n> in namespace
// every interval. label, when set, is called before each write and its answer is
// kept with the write (it runs at the same time as the write, so the write is
// no older than what it saw).
func WriteEvery(cs kubernetes.Interface, namespace, prefix string, interval time.Duration, label func(context.Context) string) *Writer {
	w := &Writer{cs: cs, namespace: namespace, stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for n := 0; ; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var tag string
			if label != nil {
				tag = label(ctx)
			}
			name := fmt.Sprintf("%s-%d", prefix, n)
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
				Data:       map[string]string{"label": tag},
			}
			_, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{})
			cancel()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, Write{Name: name, Label: tag, At: time.Now()})
			} else {
				w.failed++
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// Stop ends the writes and returns the acknowledged ones and how many failed
// (refused or unanswered: the API server was down, which loses nothing).
func (w *Writer) Stop() (acked []Write, failed int) {
	close(w.stop)
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Write(nil), w.acked...), w.failed
}

// Lost returns the acknowledged writes the API server no longer has. It lists the
// namespace's ConfigMaps once (a quorum read, in pages) rather than reading each
// write: a writer through a long update acknowledges thousands.
func Lost(ctx context.Context, cs kubernetes.Interface, namespace string, acked []Write) ([]Write, error) {
	present := map[string]bool{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		page, err := cs.CoreV1().ConfigMaps(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list ConfigMaps in %s: %w", namespace, err)
		}
		for _, cm := range page.Items {
			present[cm.Name] = true
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	var lost []Write
	for _, a := range acked {
		if !present[a.Name] {
			lost = append(lost, a)
		}
	}
	return lost, nil
}
