package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestPercentile(t *testing.T) {
	ds := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", ds(7), 0.99, 7 * time.Millisecond},
		{"median of unsorted", ds(5, 1, 3, 2, 4), 0.5, 3 * time.Millisecond},
		{"p99 of 100 is the 99th", ds(func() []int {
			v := make([]int, 100)
			for i := range v {
				v[i] = 100 - i
			}
			return v
		}()...), 0.99, 99 * time.Millisecond},
		{"max", ds(1, 9, 3), 1, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Percentile(tc.in, tc.q)).To(Equal(tc.want))
		})
	}
}

// TestOpenLoopMeasuresFromSchedule: a server that stalls makes latency grow (the
// requests queued behind it are late), it does not lower the send rate.
func TestOpenLoopMeasuresFromSchedule(t *testing.T) {
	g := NewWithT(t)
	stall := make(chan struct{})
	timer := time.AfterFunc(100*time.Millisecond, func() { close(stall) })
	defer timer.Stop()
	var first atomic.Bool
	first.Store(true)
	res := OpenLoop(context.Background(), 100, 300*time.Millisecond, 1000, func(context.Context) error {
		if first.CompareAndSwap(true, false) {
			<-stall
		}
		return nil
	})
	g.Expect(res.Count()).To(Equal(30))
	g.Expect(res.Dropped).To(BeZero())
	g.Expect(res.Percentile(1)).To(BeNumerically(">=", 90*time.Millisecond))
	g.Expect(res.Percentile(0.5)).To(BeNumerically("<", 50*time.Millisecond))
}

func TestOpenLoopDropsBeyondMaxInFlightAndCountsErrors(t *testing.T) {
	g := NewWithT(t)
	block := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(block) })
	res := OpenLoop(context.Background(), 100, 100*time.Millisecond, 2, func(context.Context) error {
		<-block
		return errors.New("refused")
	})
	g.Expect(res.Count()).To(Equal(2))
	g.Expect(res.Dropped).To(Equal(8))
	g.Expect(res.Errors).To(Equal(2))
	g.Expect(res.FirstErr).To(MatchError("refused"))
}

func TestClosedLoopThroughput(t *testing.T) {
	g := NewWithT(t)
	res := ClosedLoop(context.Background(), 2, 200*time.Millisecond, func(context.Context) error {
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	// Two workers at ~10 ms each: ~200 req/s, certainly between 50 and 220.
	g.Expect(res.Throughput()).To(BeNumerically(">", 50))
	g.Expect(res.Throughput()).To(BeNumerically("<=", 220))
	g.Expect(res.Percentile(0.5)).To(BeNumerically(">=", 10*time.Millisecond))
}
