package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// LoadOptions shape one hook-latency measurement.
type LoadOptions struct {
	Rate     float64       // open-loop requests per second
	Duration time.Duration // per round and server
	Rounds   int           // rounds alternate the servers' order, to spread the noise
	// Saturation: closed-loop workers for SatDuration per round (0 workers: skip).
	SatWorkers  int
	SatDuration time.Duration
	MaxInFlight int
}

// HookMeasure is one server's figures for one hook.
type HookMeasure struct {
	Server, Hook string
	Open, Sat    Summary
	// AllocsPerReq and CPUPerReq come from the process itself during the open-loop
	// runs: Go's heap allocation counter from /metrics, utime+stime from /proc.
	AllocsPerReq float64
	CPUPerReq    time.Duration
	// RequestsPerReq is the API requests the process made per hook call during the
	// open-loop runs (client-go's rest_client_requests_total, every client of the
	// process: management, workload clusters, informers).
	RequestsPerReq float64
	RSS            int64
}

// sample runs one load against s and reads the process's counters around it.
type sample struct {
	res      Result
	allocs   float64
	cpu      time.Duration
	requests float64
}

func measure(ctx context.Context, s *Server, run func(Request) Result, calls []Call) (sample, error) {
	var next atomic.Uint64
	do := func(ctx context.Context) error {
		i := next.Add(1) - 1
		return s.Client.Do(ctx, calls[i%uint64(len(calls))], nil)
	}
	if s.Proc == nil {
		return sample{res: run(do)}, nil
	}
	p0, err := ReadProc(s.Proc.Pid())
	if err != nil {
		return sample{}, err
	}
	m0, err := ScrapeSum(ctx, s.MetricsURL, "go_memstats_mallocs_total")
	if err != nil {
		return sample{}, err
	}
	q0, err := ScrapeSum(ctx, s.MetricsURL, apiRequests)
	if err != nil {
		return sample{}, err
	}
	res := run(do)
	m1, err := ScrapeSum(ctx, s.MetricsURL, "go_memstats_mallocs_total")
	if err != nil {
		return sample{}, err
	}
	q1, err := ScrapeSum(ctx, s.MetricsURL, apiRequests)
	if err != nil {
		return sample{}, err
	}
	p1, err := ReadProc(s.Proc.Pid())
	if err != nil {
		return sample{}, err
	}
	return sample{res: res, allocs: m1 - m0, cpu: p1.CPU - p0.CPU, requests: q1 - q0}, nil
}

// apiRequests is client-go's count of the requests of a process's REST clients, as
// controller-runtime registers it (both extensions run a controller-runtime manager).
const apiRequests = "rest_client_requests_total"

// MeasureHook loads every server with the same hook calls (calls[server name]),
// open loop at opts.Rate and then closed loop, in alternating order per round.
func MeasureHook(ctx context.Context, hook string, servers []*Server, calls map[string][]Call, opts LoadOptions) ([]HookMeasure, error) {
	if opts.MaxInFlight == 0 {
		opts.MaxInFlight = 512
	}
	open := func(do Request) Result { return OpenLoop(ctx, opts.Rate, opts.Duration, opts.MaxInFlight, do) }
	sat := func(do Request) Result { return ClosedLoop(ctx, opts.SatWorkers, opts.SatDuration, do) }
	// Warm-up: connections, first-call caches (e.g. workload cluster clients).
	for _, s := range servers {
		if _, err := measure(ctx, s, func(do Request) Result { return OpenLoop(ctx, opts.Rate, time.Second, opts.MaxInFlight, do) }, calls[s.Name]); err != nil {
			return nil, err
		}
	}
	type acc struct {
		open, sat Result
		allocs    float64
		cpu       time.Duration
		requests  float64
	}
	accs := map[string]*acc{}
	for _, s := range servers {
		accs[s.Name] = &acc{}
	}
	for r := range opts.Rounds {
		order := slices.Clone(servers)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			smp, err := measure(ctx, s, open, calls[s.Name])
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", s.Name, hook, err)
			}
			a := accs[s.Name]
			a.open.Merge(smp.res)
			a.allocs += smp.allocs
			a.cpu += smp.cpu
			a.requests += smp.requests
		}
		if opts.SatWorkers == 0 {
			continue
		}
		for _, s := range order {
			smp, err := measure(ctx, s, sat, calls[s.Name])
			if err != nil {
				return nil, fmt.Errorf("%s %s saturation: %w", s.Name, hook, err)
			}
			accs[s.Name].sat.Merge(smp.res)
		}
	}
	var out []HookMeasure
	for _, s := range servers {
		a := accs[s.Name]
		m := HookMeasure{Server: s.Name, Hook: hook, Open: Summarize(a.open), Sat: Summarize(a.sat)}
		if n := a.open.Count(); n > 0 {
			m.AllocsPerReq = a.allocs / float64(n)
			m.CPUPerReq = a.cpu / time.Duration(n)
			m.RequestsPerReq = a.requests / float64(n)
		}
		if s.Proc != nil {
			if st, err := ReadProc(s.Proc.Pid()); err == nil {
				m.RSS = st.RSS
			}
		}
		if a.open.FirstErr != nil || a.sat.FirstErr != nil {
			return out, fmt.Errorf("%s %s: %d+%d errors, first: %w", s.Name, hook, a.open.Errors, a.sat.Errors, firstErr(a.open.FirstErr, a.sat.FirstErr))
		}
		out = append(out, m)
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
