package simhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-inplace/capi-inplace/internal/agent"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The simulated host injects its action faults by wrapping the agent's own parts,
// as controller-runtime's interceptor wraps a client: the executor has no hooks.
// pause-before-<action> holds the journal save that records the action's start
// (so an agent killed while paused never started it), fail-action-<action> fails
// the action's call into the host, its OS backend, its gates or its reboot (the
// executor names the action in the call's context: executor.ActionFrom).

// Journal wraps the agent's journal for pause-before-<action>; ctx ends a pause.
func (h *Host) Journal(ctx context.Context, next journal.Journal) journal.Journal {
	return pausingJournal{Journal: next, h: h, ctx: ctx}
}

type pausingJournal struct {
	journal.Journal
	h   *Host
	ctx context.Context
}

func (j pausingJournal) Save(e journal.Entry) error {
	if e.InFlight != "" {
		// The save that begins an action counts one more run of it than the
		// journal holds; the saves after (a reboot's) do not pause again.
		if prev, err := j.Load(); err == nil && e.Runs[e.InFlight] > prev.Runs[e.InFlight] {
			if err := j.h.pauseBefore(j.ctx, e.InFlight); err != nil {
				return err
			}
		}
	}
	return j.Journal.Save(e)
}

// pauseBefore blocks while pause-before-<action> exists (paused-at tells where).
func (h *Host) pauseBefore(ctx context.Context, key string) error {
	pause := h.simPath("pause-before-" + faultName(key))
	if _, err := os.Stat(pause); err != nil {
		return nil
	}
	h.Log.Info("Simulated host paused before action", "action", key, "file", pause)
	_ = writeFile(h.simPath("paused-at"), []byte(key+"\n"))
	for {
		if _, err := os.Stat(pause); err != nil {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	_ = os.Remove(h.simPath("paused-at"))
	return nil
}

// actionFault is the fail-action-<action> fault of the action ctx belongs to.
func (h *Host) actionFault(ctx context.Context) error {
	key, ok := executor.ActionFrom(ctx)
	if !ok {
		return nil
	}
	msg, ok := h.fault("fail-action-" + faultName(key))
	if !ok {
		return nil
	}
	if msg == "" {
		msg = "injected failure"
	}
	return fmt.Errorf("simulated fault (fail-action-%s): %s", faultName(key), msg)
}

// Kube wraps the agent's Kubernetes layer for fail-action-<action>.
func (h *Host) Kube(next executor.Host) executor.Host { return faultyKube{Host: next, h: h} }

type faultyKube struct {
	executor.Host
	h *Host
}

func (k faultyKube) Backup(ctx context.Context, attempt string, paths []string) error {
	return k.call(ctx, func() error { return k.Host.Backup(ctx, attempt, paths) })
}

func (k faultyKube) Restore(ctx context.Context, attempt string) error {
	return k.call(ctx, func() error { return k.Host.Restore(ctx, attempt) })
}

func (k faultyKube) RestoreWithImageRollback(ctx context.Context, attempt string) error {
	return k.call(ctx, func() error { return k.Host.RestoreWithImageRollback(ctx, attempt) })
}

func (k faultyKube) WriteFiles(ctx context.Context, files []protocol.File) error {
	return k.call(ctx, func() error { return k.Host.WriteFiles(ctx, files) })
}

func (k faultyKube) ApplyUsers(ctx context.Context, raw json.RawMessage) error {
	return k.call(ctx, func() error { return k.Host.ApplyUsers(ctx, raw) })
}

func (k faultyKube) ApplyNTP(ctx context.Context, raw json.RawMessage) error {
	return k.call(ctx, func() error { return k.Host.ApplyNTP(ctx, raw) })
}

func (k faultyKube) KubeletFlags(ctx context.Context, args []protocol.Arg) error {
	return k.call(ctx, func() error { return k.Host.KubeletFlags(ctx, args) })
}

func (k faultyKube) ControlPlaneConfig(ctx context.Context, p *protocol.NodePlan) error {
	return k.call(ctx, func() error { return k.Host.ControlPlaneConfig(ctx, p) })
}

func (k faultyKube) InstallKubeadm(ctx context.Context, p protocol.KubernetesPlan) error {
	return k.call(ctx, func() error { return k.Host.InstallKubeadm(ctx, p) })
}

func (k faultyKube) InstallKubelet(ctx context.Context, p protocol.KubernetesPlan) error {
	return k.call(ctx, func() error { return k.Host.InstallKubelet(ctx, p) })
}

func (k faultyKube) KubeadmUpgrade(ctx context.Context, p protocol.KubernetesPlan) error {
	return k.call(ctx, func() error { return k.Host.KubeadmUpgrade(ctx, p) })
}

func (k faultyKube) RestartKubelet(ctx context.Context) error {
	return k.call(ctx, func() error { return k.Host.RestartKubelet(ctx) })
}

func (k faultyKube) EtcdSnapshot(ctx context.Context, attempt string) (int, error) {
	if err := k.h.actionFault(ctx); err != nil {
		return 0, err
	}
	return k.Host.EtcdSnapshot(ctx, attempt)
}

func (k faultyKube) RestoreEtcd(ctx context.Context, attempt string) error {
	return k.call(ctx, func() error { return k.Host.RestoreEtcd(ctx, attempt) })
}

func (k faultyKube) call(ctx context.Context, next func() error) error {
	if err := k.h.actionFault(ctx); err != nil {
		return err
	}
	return next()
}

// Backend wraps an OS backend for fail-action-<action> (backend-stage, ...).
func (h *Host) Backend(next backend.Backend) backend.Backend {
	return faultyBackend{Backend: next, h: h}
}

type faultyBackend struct {
	backend.Backend
	h *Host
}

func (b faultyBackend) Stage(ctx context.Context, a backend.Artifact) error {
	return b.call(ctx, func() error { return b.Backend.Stage(ctx, a) })
}

func (b faultyBackend) Activate(ctx context.Context, a backend.Artifact) error {
	return b.call(ctx, func() error { return b.Backend.Activate(ctx, a) })
}

func (b faultyBackend) Verify(ctx context.Context, a backend.Artifact) error {
	return b.call(ctx, func() error { return b.Backend.Verify(ctx, a) })
}

func (b faultyBackend) Commit(ctx context.Context, a backend.Artifact) error {
	return b.call(ctx, func() error { return b.Backend.Commit(ctx, a) })
}

func (b faultyBackend) Rollback(ctx context.Context, a backend.Artifact) error {
	return b.call(ctx, func() error { return b.Backend.Rollback(ctx, a) })
}

func (b faultyBackend) call(ctx context.Context, next func() error) error {
	if err := b.h.actionFault(ctx); err != nil {
		return err
	}
	return next()
}

// Gates wraps the agent's gate runner for fail-action-gates and, when it is a
// gate.Checker, for fail-gate (see checker).
func (h *Host) Gates(next executor.GateRunner) executor.GateRunner {
	if c, ok := next.(*gate.Checker); ok {
		next = h.checker(c)
	}
	return faultyGates{next: next, h: h}
}

type faultyGates struct {
	next executor.GateRunner
	h    *Host
}

func (g faultyGates) Run(ctx context.Context, p *protocol.NodePlan) error {
	if err := g.h.actionFault(ctx); err != nil {
		return err
	}
	return g.next.Run(ctx, p)
}

// BeforeTouch keeps the wrapped runner's check before a plan touches the node
// (agent.BeforeToucher): the wrapper must not hide it.
func (g faultyGates) BeforeTouch(ctx context.Context, p *protocol.NodePlan) error {
	if bt, ok := g.next.(agent.BeforeToucher); ok {
		return bt.BeforeTouch(ctx, p)
	}
	return nil
}

// EndHold passes the end of a hold on to the wrapped runner.
func (g faultyGates) EndHold(p *protocol.NodePlan) {
	if bt, ok := g.next.(agent.BeforeToucher); ok {
		bt.EndHold(p)
	}
}

// fail-gate is injected the same way: the gate runner the executor has, when it
// is a gate.Checker, runs with its node reader, etcd checker and command runner
// wrapped, and those fail the calls made for the named gate (gate.GateFrom). An
// HTTP gate reaches its URL itself, not through the host: point it at a failing
// URL instead.
func (h *Host) checker(c *gate.Checker) *gate.Checker {
	cc := *c
	if cc.Nodes != nil {
		cc.Nodes = gateNodes{next: cc.Nodes, h: h}
	}
	if cc.Etcd != nil {
		cc.Etcd = gateEtcd{next: cc.Etcd, h: h}
	}
	if cc.Runner != nil {
		cc.Runner = gateRunner{next: cc.Runner, h: h}
	}
	return &cc
}

// gateFault is the fail-gate fault of the gate ctx belongs to: the file names
// the gate, or is empty for every gate.
func (h *Host) gateFault(ctx context.Context) error {
	name, ok := gate.GateFrom(ctx)
	if !ok {
		return nil
	}
	target, ok := h.fault("fail-gate")
	if !ok || (target != "" && target != name) {
		return nil
	}
	return fmt.Errorf("simulated fault (fail-gate): gate %s fails", name)
}

type gateNodes struct {
	next gate.NodeReader
	h    *Host
}

func (n gateNodes) Node(ctx context.Context) (*corev1.Node, error) {
	if err := n.h.gateFault(ctx); err != nil {
		return nil, err
	}
	return n.next.Node(ctx)
}

func (n gateNodes) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if err := n.h.gateFault(ctx); err != nil {
		return nil, err
	}
	return n.next.Pod(ctx, namespace, name)
}

type gateEtcd struct {
	next gate.EtcdChecker
	h    *Host
}

func (e gateEtcd) EtcdHealthy(ctx context.Context) error {
	if err := e.h.gateFault(ctx); err != nil {
		return err
	}
	return e.next.EtcdHealthy(ctx)
}

func (e gateEtcd) EtcdQuorum(ctx context.Context) error {
	if err := e.h.gateFault(ctx); err != nil {
		return err
	}
	return e.next.EtcdQuorum(ctx)
}

type gateRunner struct {
	next backend.Runner
	h    *Host
}

func (r gateRunner) Run(ctx context.Context, c backend.Command) (backend.Result, error) {
	if err := r.h.gateFault(ctx); err != nil {
		return backend.Result{}, err
	}
	return r.next.Run(ctx, c)
}
