package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// OSImageResolver maps a desired infrastructure machine to the OS image its node must
// run; nil means the OS image does not change (internal/policy implements it).
type OSImageResolver interface {
	ResolveOSImage(infra *unstructured.Unstructured) (*protocol.OSImage, error)
}

// EventRecorder records Events on the Machine; k8s.io/client-go/tools/events'
// EventRecorder (as returned by a controller-runtime manager) satisfies it.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}

// A controller-runtime manager's GetEventRecorder(name) fits.
var _ EventRecorder = events.EventRecorder(nil)

// DrainOptions control cordon and drain.
type DrainOptions struct {
	// Timeout bounds how long a drain may stay blocked before the hook answers
	// Failure (the node stays cordoned and later calls keep trying). Zero: 10 minutes.
	Timeout time.Duration
	// SkipEviction cordons but evicts nothing, by policy (e.g. nodes whose pods must
	// ride through the update). Single-node clusters skip eviction unless
	// EvictSingleNode: there is nowhere for the pods to go.
	SkipEviction bool
	// EvictSingleNode evicts even on a single-node cluster (where the evicted pods
	// cannot run anywhere until the node is back); by default eviction is skipped there.
	EvictSingleNode bool
	// Force evicts pods no controller recreates; without it they block the drain.
	Force bool
	// AttemptBudget bounds one drain attempt. Zero: 3 s.
	AttemptBudget time.Duration
}

// Options configure a Coordinator; New validates them.
type Options struct {
	// Client reads Machines, Clusters, Secrets and control-plane objects in the
	// management cluster; its scheme must know CAPI core and kubeadm bootstrap types.
	Client client.Client
	// Clusters hands out workload-cluster clients.
	Clusters WorkloadClusters
	// OSImages resolves the infrastructure machine's OS image; nil: no OS change.
	OSImages OSImageResolver
	// Binaries names the kubeadm and kubelet a node downloads for its new version;
	// nil: the OS image brings them.
	Binaries BinariesResolver
	// Recorder records Events on Machines.
	Recorder EventRecorder
	Drain    DrainOptions
	// ManageAgents makes the coordinator install and upgrade the agent itself.
	ManageAgents bool
	// AgentImage is the agent's image; required with ManageAgents.
	AgentImage string
	// AgentArgs override the agent container's arguments.
	AgentArgs []string
	// CallTimeout bounds one hook call. Zero: 8 s (CAPI's default hook timeout is 10 s).
	CallTimeout time.Duration
	// Linger is how long one call keeps re-checking a node update that started less
	// than 30 s ago before it answers "in progress": most updates finish within a
	// second or two once the agent has the plan, and CAPI would otherwise only learn
	// it on its next call. Zero: 1.5 s; negative: never linger.
	Linger time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Coordinator drives one node update per Machine behind the UpdateMachine hook. It
// keeps no state of its own: every call rebuilds its view from API objects.
type Coordinator struct {
	opts Options
}

// New validates the options and returns a Coordinator.
func New(opts Options) (*Coordinator, error) {
	var errs []error
	if opts.Client == nil {
		errs = append(errs, errors.New("management Client is required"))
	}
	if opts.Clusters == nil {
		errs = append(errs, errors.New("workload Clusters getter is required"))
	}
	if opts.Recorder == nil {
		errs = append(errs, errors.New("event Recorder is required"))
	}
	if opts.ManageAgents && opts.AgentImage == "" {
		errs = append(errs, errors.New("AgentImage is required when ManageAgents is set"))
	}
	if opts.Drain.Timeout < 0 || opts.Drain.AttemptBudget < 0 || opts.CallTimeout < 0 {
		errs = append(errs, errors.New("timeouts must not be negative"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("coordinator options: %w", errors.Join(errs...))
	}
	if opts.Drain.Timeout == 0 {
		opts.Drain.Timeout = 10 * time.Minute
	}
	if opts.Drain.AttemptBudget == 0 {
		opts.Drain.AttemptBudget = 3 * time.Second
	}
	if opts.Linger == 0 {
		opts.Linger = 1500 * time.Millisecond
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 8 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Coordinator{opts: opts}, nil
}

// UpdateMachine is the UpdateMachine hook: one bounded, idempotent step of the update
// of the Machine's node. Success with RetryAfterSeconds > 0 means in progress, 0 done;
// Failure carries the cause (CAPI retries it).
func (c *Coordinator) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	m := &req.Desired.Machine
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", client.ObjectKeyFromObject(m).String())
	ctx = ctrl.LoggerInto(ctx, log)

	out := c.lingerUpdate(ctx, req)
	resp.Message = out.message
	resp.RetryAfterSeconds = out.retry
	if out.failure {
		resp.Status = runtimehooksv1.ResponseStatusFailure
		resp.RetryAfterSeconds = 0
		log.Info("In-place update failed", "message", out.message)
		return
	}
	resp.Status = runtimehooksv1.ResponseStatusSuccess
	log.V(1).Info("In-place update step", "message", out.message, "retryAfterSeconds", out.retry)
}

// lingerPoll is the pause between two checks of a lingering call.
const lingerPoll = 250 * time.Millisecond

// lingerUpdate runs update and, while the answer is the short-update "call back in
// 1 s" (waitRetry's first window: the agent or the node's gates are being waited
// for), repeats it until Linger has passed. Every repetition is the same idempotent
// step, so lingering changes how soon an answer comes, never what it is.
func (c *Coordinator) lingerUpdate(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) outcome {
	// Wall time, not Options.Now: lingering is about how long the call takes.
	deadline := time.Now().Add(c.opts.Linger)
	for {
		out := c.update(ctx, req)
		if out.failure || out.retry != waitRetry(0) || !time.Now().Add(lingerPoll).Before(deadline) {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(lingerPoll):
		}
	}
}

// outcome is the hook's answer.
type outcome struct {
	failure bool
	retry   int32
	message string
}

func inProgress(retry int32, msg string) outcome { return outcome{retry: retry, message: msg} }
func failure(msg string) outcome                 { return outcome{failure: true, message: msg} }
func done(msg string) outcome                    { return outcome{message: msg} }

func (c *Coordinator) drainOptions() drain.Options {
	return drain.Options{Budget: c.opts.Drain.AttemptBudget, Force: c.opts.Drain.Force}
}

func (c *Coordinator) agentConfig() agentinstall.Config {
	return agentinstall.Config{Image: c.opts.AgentImage, Args: c.opts.AgentArgs}
}
