package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/bench"
	"github.com/capi-inplace/capi-inplace/internal/extension"
	pt "github.com/capi-inplace/capi-inplace/internal/planner/plannertest"
)

// runner holds what the sections share: one management API server, the two
// extension processes and the results.
type runner struct {
	o                options
	bin, tmp, logDir string

	env      *bench.Env
	c        client.Client
	ours, up *bench.Server

	rows  []bench.Row
	notes []string
	// idle RSS of the extension processes right after start
	oursIdle, upIdle bench.ProcStat
}

func numCPU() int { return runtime.NumCPU() }

// stop stops the extension processes and the API server; safe to call again.
func (r *runner) stop() {
	for _, s := range []*bench.Server{r.ours, r.up} {
		if s != nil {
			s.Stop()
		}
	}
	r.ours, r.up = nil, nil
	if r.env != nil {
		r.env.Stop()
	}
	r.env = nil
}

// ensureEnv starts the management API server once.
func (r *runner) ensureEnv() error {
	if r.env != nil {
		return nil
	}
	env, err := bench.StartEnv(r.bin, r.tmp)
	if err != nil {
		return err
	}
	r.env = env
	r.c, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	return err
}

// ensureServers starts our extension and upstream's test extension once.
func (r *runner) ensureServers(ctx context.Context) error {
	if err := r.ensureEnv(); err != nil {
		return err
	}
	var err error
	if r.ours == nil {
		if r.ours, err = bench.StartServer(ctx, bench.OurExtension(r.bin, r.env.Kubeconfig, r.o.extensionArgs...), r.tmp, r.logDir); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		if r.oursIdle, err = bench.ReadProc(r.ours.Proc.Pid()); err != nil {
			return err
		}
	}
	if r.up == nil {
		if r.up, err = bench.StartServer(ctx, bench.UpstreamTestExtension(r.bin, r.env.Kubeconfig), r.tmp, r.logDir); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		if r.upIdle, err = bench.ReadProc(r.up.Proc.Pid()); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) loadOptions() bench.LoadOptions {
	return bench.LoadOptions{Rate: r.o.rate, Duration: r.o.duration, Rounds: r.o.rounds, SatWorkers: r.o.satWorkers, SatDuration: r.o.satDuration}
}

const p99Target = 10 * time.Millisecond

// hooks: section 1, hook latency under load, ours against upstream's test extension.
func (r *runner) hooks(ctx context.Context) error {
	if err := r.ensureServers(ctx); err != nil {
		return err
	}
	ms, err := bench.Encode(runtimehooksv1.CanUpdateMachineSet, extension.HandlerCanUpdateMachineSet, bench.CanUpdateMachineSetRequest())
	if err != nil {
		return err
	}
	m, err := bench.Encode(runtimehooksv1.CanUpdateMachine, extension.HandlerCanUpdateMachine, bench.CanUpdateMachineRequest())
	if err != nil {
		return err
	}
	// Both must answer with patches: the load measures real answers.
	for _, s := range []*bench.Server{r.ours, r.up} {
		var resp runtimehooksv1.CanUpdateMachineSetResponse
		if err := s.Client.Do(ctx, ms, &resp); err != nil {
			return err
		}
		if resp.Status != runtimehooksv1.ResponseStatusSuccess || !resp.MachineSetPatch.IsDefined() || !resp.BootstrapConfigTemplatePatch.IsDefined() {
			b, _ := json.Marshal(resp)
			return fmt.Errorf("%s CanUpdateMachineSet: want Success with MachineSet and KubeadmConfigTemplate patches, got %s", s.Name, b)
		}
		var mresp runtimehooksv1.CanUpdateMachineResponse
		if err := s.Client.Do(ctx, m, &mresp); err != nil {
			return err
		}
		if mresp.Status != runtimehooksv1.ResponseStatusSuccess || !mresp.MachinePatch.IsDefined() {
			b, _ := json.Marshal(mresp)
			return fmt.Errorf("%s CanUpdateMachine: want Success with a Machine patch, got %s", s.Name, b)
		}
	}
	upd, err := r.seedWaiting(ctx, bench.ClusterObjects{Namespace: pt.Namespace, Cluster: pt.ClusterName, Machines: 10, Kubeconfig: r.env.KubeconfigData})
	if err != nil {
		return err
	}
	servers := []*bench.Server{r.ours, r.up}
	for _, h := range []struct {
		name    string
		calls   []bench.Call
		compare bool
	}{
		{"CanUpdateMachineSet", []bench.Call{ms}, true},
		{"CanUpdateMachine", []bench.Call{m}, true},
		{"UpdateMachine", upd, false},
	} {
		logf("hooks: %s", h.name)
		opts := r.loadOptions()
		if h.name == "UpdateMachine" {
			// The binary's throttled calls take up to its 8 s call timeout: fewer rounds.
			opts.Rounds = min(opts.Rounds, 2)
		}
		res, err := bench.MeasureHook(ctx, h.name, servers, map[string][]bench.Call{r.ours.Name: h.calls, r.up.Name: h.calls}, opts)
		if err != nil {
			return err
		}
		r.rows = append(r.rows, bench.HookRows("1", r.o.rate, res[0], res[1], p99Target, h.compare)...)
		if h.name == "UpdateMachine" {
			if err := r.updateMachineUnthrottled(ctx, upd); err != nil {
				return err
			}
		}
	}
	return r.handlerBench(ctx, ms, m, upd)
}

// inProcessLive names the in-process server: the hook handlers without the
// coordinator's caches, so every call reads live (bench.NewHandlers).
const inProcessLive = "capi-inplace in-process, live reads, unthrottled"

// liveReadsTarget is the target column of live-read rows: issue 15's p99 target is
// for the steady state, which the binary answers from caches; a live call is the
// path of a call that writes or decides (cordon, publish, done), measured for
// reference.
const liveReadsTarget = "- (live path; the p99 target is the cached steady state's)"

// updateMachineUnthrottled measures UpdateMachine on the in-process server whose
// workload clients have no client-side rate limit and which has no caches: the
// cost of the live path every writing call takes.
func (r *runner) updateMachineUnthrottled(ctx context.Context, calls []bench.Call) error {
	h, err := bench.NewHandlers(r.env.Config, r.env.Scheme, true)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := bench.StartInProcess(sctx, inProcessLive, h, r.tmp)
	if err != nil {
		return err
	}
	opts := r.loadOptions()
	res, err := bench.MeasureHook(ctx, "UpdateMachine", []*bench.Server{s}, map[string][]bench.Call{s.Name: calls}, opts)
	if err != nil {
		return err
	}
	o := res[0].Open
	r.rows = append(r.rows,
		bench.Row{Section: "1", Measurement: fmt.Sprintf("UpdateMachine p50 / p99 at %.0f req/s, in-process server without caches (every read live) and unthrottled workload clients (n=%d)", r.o.rate, o.Count),
			Ours: fmt.Sprintf("%s / %s", ms(o.P50), ms(o.P99)), Target: liveReadsTarget},
		bench.Row{Section: "1", Measurement: "UpdateMachine saturation, same server (closed loop; p99)",
			Ours: fmt.Sprintf("%.0f req/s (%s)", res[0].Sat.Throughput, ms(res[0].Sat.P99))})
	return nil
}

// handlerBench is the Go benchmark of the handler path (decode, handle, encode; no
// HTTP), -benchmem style; UpdateMachine with real reads against the API server.
func (r *runner) handlerBench(ctx context.Context, ms, m bench.Call, upd []bench.Call) error {
	pure, err := bench.NewHandlers(r.env.Config, r.env.Scheme, true)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name  string
		calls []bench.Call
	}{{"CanUpdateMachineSet", []bench.Call{ms}}, {"CanUpdateMachine", []bench.Call{m}}, {"UpdateMachine (waiting: 9 GETs)", upd}} {
		if err := bench.HandlerPath(ctx, pure, c.calls[0]); err != nil {
			return err
		}
		res := testing.Benchmark(func(b *testing.B) { bench.BenchmarkHandler(b, pure, c.calls) })
		r.rows = append(r.rows, bench.Row{Section: "1", Measurement: "Go benchmark of the handler path (decode, handle, encode): " + c.name,
			Ours:     fmt.Sprintf("%.0f µs/op, %d B/op, %d allocs/op (n=%d)", float64(res.NsPerOp())/1e3, res.AllocedBytesPerOp(), res.AllocsPerOp(), res.N),
			Baseline: "- (upstream's handlers are not in this module)"})
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// seedWaiting creates a cluster's objects and drives each Machine's update to the
// steady "waiting for the agent" state; it returns the UpdateMachine calls.
func (r *runner) seedWaiting(ctx context.Context, objs bench.ClusterObjects) ([]bench.Call, error) {
	machines, err := objs.Create(ctx, r.c)
	if err != nil {
		return nil, err
	}
	calls, err := updateCalls(ctx, r.c, machines)
	if err != nil {
		return nil, err
	}
	if err := bench.DriveToWaiting(ctx, r.ours.Client, r.c, machines, calls); err != nil {
		return nil, err
	}
	return calls, nil
}

func updateCalls(ctx context.Context, c client.Reader, machines []*clusterv1.Machine) ([]bench.Call, error) {
	calls := make([]bench.Call, len(machines))
	for i, m := range machines {
		req, err := bench.UpdateMachineRequest(ctx, c, m)
		if err != nil {
			return nil, err
		}
		if calls[i], err = bench.Encode(runtimehooksv1.UpdateMachine, extension.HandlerUpdateMachine, req); err != nil {
			return nil, err
		}
	}
	return calls, nil
}
