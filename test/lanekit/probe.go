package lanekit

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Outage records when a probe failed, each probe a fixed interval after the last.
type Outage struct {
	mu       sync.Mutex
	down     []window
	current  *window
	ok, all  int
	stop     chan struct{}
	finished chan struct{}
}

type window struct{ from, to time.Time }

// Probe runs check every interval until Stop.
func Probe(interval time.Duration, check func(context.Context) error) *Outage {
	o := &Outage{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(o.finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := check(ctx)
			cancel()
			now := time.Now()
			o.mu.Lock()
			o.all++
			if err == nil {
				o.ok++
			}
			switch {
			case err != nil && o.current == nil:
				o.current = &window{from: now}
			case err == nil && o.current != nil:
				o.current.to = now
				o.down = append(o.down, *o.current)
				o.current = nil
			}
			o.mu.Unlock()
			select {
			case <-o.stop:
				return
			case <-t.C:
			}
		}
	}()
	return o
}

// ProbeAPI probes an API server's /readyz every 250 ms.
func ProbeAPI(cs kubernetes.Interface) *Outage {
	return Probe(250*time.Millisecond, func(ctx context.Context) error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// Stop ends the probe and returns the total unavailable time and the longest window.
func (o *Outage) Stop() (total, longest time.Duration, windows int) {
	return o.StopSince(time.Time{})
}

// StopSince is Stop counting only the unavailable time after from (a window open
// at from counts from there).
func (o *Outage) StopSince(from time.Time) (total, longest time.Duration, windows int) {
	close(o.stop)
	<-o.finished
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current != nil {
		o.current.to = time.Now()
		o.down = append(o.down, *o.current)
		o.current = nil
	}
	n := 0
	for _, w := range o.down {
		if !w.to.After(from) {
			continue
		}
		if w.from.Before(from) {
			w.from = from
		}
		n++
		d := w.to.Sub(w.from)
		total += d
		if d > longest {
			longest = d
		}
	}
	return total, longest, n
}

// Availability is the share of probes that succeeded (after Stop).
func (o *Outage) Availability() (ok, all int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ok, o.all
}
