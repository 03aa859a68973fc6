package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Request sends one request and reports whether the answer was the expected one.
type Request func(ctx context.Context) error

// Result holds the latencies of one load run.
type Result struct {
	Latencies []time.Duration // of successful and failed requests alike
	Errors    int
	Dropped   int // open loop: sends skipped because MaxInFlight requests were pending
	Elapsed   time.Duration
	FirstErr  error
}

// Merge appends other's samples (rounds of the same measurement).
func (r *Result) Merge(other Result) {
	r.Latencies = append(r.Latencies, other.Latencies...)
	r.Errors += other.Errors
	r.Dropped += other.Dropped
	r.Elapsed += other.Elapsed
	if r.FirstErr == nil {
		r.FirstErr = other.FirstErr
	}
}

// Count is the number of completed requests.
func (r Result) Count() int { return len(r.Latencies) }

// Throughput is completed requests per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

// Percentile returns the q-quantile (0..1) by nearest rank; 0 without samples.
func (r Result) Percentile(q float64) time.Duration {
	return Percentile(r.Latencies, q)
}

// Percentile returns the q-quantile (0..1) of d by nearest rank; 0 for no samples.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return s[i]
}

// OpenLoop sends rate requests per second for duration, each at its scheduled time
// regardless of earlier answers, and measures each latency from its scheduled time.
// At most maxInFlight requests are pending; a send that would exceed it is dropped
// and counted (the server cannot keep up).
func OpenLoop(ctx context.Context, rate float64, duration time.Duration, maxInFlight int, do Request) Result {
	n := int(rate * duration.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, 0, n)
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		inFlight atomic.Int64
		errs     int
		dropped  int
		firstErr error
	)
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return Result{Latencies: lat, Errors: errs, Dropped: dropped, Elapsed: time.Since(start), FirstErr: ctx.Err()}
			case <-time.After(d):
			}
		}
		if inFlight.Load() >= int64(maxInFlight) {
			mu.Lock()
			dropped++
			mu.Unlock()
			continue
		}
		inFlight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inFlight.Add(-1)
			err := do(ctx)
			d := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, d)
			if err != nil {
				errs++
				if firstErr == nil {
					firstErr = err
				}
			}
		}()
	}
	wg.Wait()
	// Elapsed is the schedule's length: the achieved rate is what was sent in it.
	elapsed := max(time.Since(start), duration)
	return Result{Latencies: lat, Errors: errs, Dropped: dropped, Elapsed: elapsed, FirstErr: firstErr}
}

// ClosedLoop runs workers that each send the next request as soon as the previous
// one answered, for duration: the server's saturation throughput.
func ClosedLoop(ctx context.Context, workers int, duration time.Duration, do Request) Result {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		res Result
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			var errs int
			var firstErr error
			for ctx.Err() == nil {
				t0 := time.Now()
				err := do(context.WithoutCancel(ctx))
				local = append(local, time.Since(t0))
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			res.Latencies = append(res.Latencies, local...)
			res.Errors += errs
			if res.FirstErr == nil {
				res.FirstErr = firstErr
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// Summary is a Result reduced to the table's figures.
type Summary struct {
	Count      int
	Throughput float64
	P50, P99   time.Duration
	Max        time.Duration
	Errors     int
	Dropped    int
}

// Summarize reduces r.
func Summarize(r Result) Summary {
	return Summary{Count: r.Count(), Throughput: r.Throughput(), P50: r.Percentile(0.50), P99: r.Percentile(0.99),
		Max: r.Percentile(1), Errors: r.Errors, Dropped: r.Dropped}
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
