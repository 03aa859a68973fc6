package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/agentinstall"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/drain"
	"github.com/capi-inplace/capi-inplace/internal/policy"
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
	// Preflight names the kubeadm preflight checks a Machine's pool skips; nil: none.
	Preflight PreflightResolver
	// Gates names the user-defined health gates of a Machine's pools; nil: none.
	Gates GatesResolver
	// NodeConfig names the OS backend configuration of a Machine's pool
	// (nodeconfig.go); nil: nodes keep the configuration they have.
	NodeConfig NodeConfigResolver
	// RegistryCredentials names the pull Secrets of private OCI registries whose
	// logins go into the sealed plans that fetch from them; nil: anonymous pulls.
	RegistryCredentials RegistryCredentialsResolver
	// DeclaredOSImages resolves the OS image a KubeadmConfig declares in
	// policy.OSImageFile (nodeconfig.go); nil: such a declaration is only a file.
	DeclaredOSImages DeclaredOSImageResolver
	// Fleet names the failure budget, maintenance windows and soak of a Machine's
	// pool (fleet.go); nil: a budget of 1 per cluster, no windows, no soak.
	Fleet FleetResolver
	// FleetMetrics counts updates held by the fleet controls; nil: none.
	FleetMetrics FleetMetrics
	// Metrics records the transitions of node updates (metrics.go); nil: none.
	Metrics UpdateMetrics
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
	// Deadlines bound each phase of a node update (watchdog.go); a zero field takes
	// the policy's default (DeadlinesFromPolicy(policy.Builtin().Deadlines())).
	Deadlines Deadlines
	// PoolDeadlines, when set, gives each Machine the deadlines of its pool (the
	// policy's deadlines.pools); Deadlines fills what it leaves zero.
	PoolDeadlines DeadlinesResolver
	// Linger is how long one call keeps re-checking a node update that started less
	// than 30 s ago before it answers "in progress": most updates finish within a
	// second or two once the agent has the plan, and CAPI would otherwise only learn
	// it on its next call. Zero: 1.5 s; negative: never linger.
	Linger time.Duration
	// Caches are the informer-backed sources of steady-state calls (caches.go); nil:
	// every call reads live.
	Caches *Caches
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Coordinator drives one node update per Machine behind the UpdateMachine hook. It
// keeps no state of its own: every call rebuilds its view from API objects (the
// report writes still pending after a done answer are the only work it tracks,
// laterreports.go).
type Coordinator struct {
	opts Options
	// fromCache marks the view of a call that reads from caches (caches.go).
	fromCache bool
	// later holds the report writes of calls that answered done (laterreports.go).
	later *laterReports
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
	if opts.Caches != nil && (opts.Caches.Management == nil || opts.Caches.Secrets == nil || opts.Caches.Workloads == nil) {
		errs = append(errs, errors.New("caches need Management, Secrets and Workloads"))
	}
	if opts.Drain.Timeout < 0 || opts.Drain.AttemptBudget < 0 || opts.CallTimeout < 0 || opts.Deadlines.negative() {
		errs = append(errs, errors.New("timeouts must not be negative"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("coordinator options: %w", errors.Join(errs...))
	}
	opts.Recorder = redactingRecorder{opts.Recorder}
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
	opts.Deadlines = opts.Deadlines.withDefaults(DeadlinesFromPolicy(policy.Builtin().Deadlines()))
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Coordinator{opts: opts, later: newLaterReports()}, nil
}

// UpdateMachine is the UpdateMachine hook: one bounded, idempotent step of the update
// of the Machine's node. Success with RetryAfterSeconds > 0 means in progress, 0 done;
// Failure carries the cause (CAPI retries it).
//
// The request is a trigger only: the Machine it names, its bootstrap config and its
// infrastructure machine are read from the management API, the Machine must be marked
// by Cluster API for an in-place update in a namespace that opted in, and a request
// that disagrees with the stored objects is refused before anything is touched.
func (c *Coordinator) UpdateMachine(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest, resp *runtimehooksv1.UpdateMachineResponse) {
	c.Update(ctx, req).WriteResponse(resp)
}

// Update is UpdateMachine answering the typed Outcome, which the hook handler
// consumes (and writes with Outcome.WriteResponse).
func (c *Coordinator) Update(ctx context.Context, req *runtimehooksv1.UpdateMachineRequest) Outcome {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	ctx = c.withMachineLogger(ctx, &req.Desired.Machine)
	ctx, trace := withCallTrace(ctx)
	out := func() Outcome {
		if c.opts.Caches != nil {
			return c.lingerCached(ctx, req)
		}
		d, out, ok := c.readStored(ctx, req)
		if !ok {
			return out
		}
		return c.lingerUpdate(ctx, d)
	}()
	trace.log(ctx, out)
	logOutcome(ctx, out)
	return out
}

func (c *Coordinator) withMachineLogger(ctx context.Context, m *clusterv1.Machine) context.Context {
	log := ctrl.LoggerFrom(ctx).WithValues("Machine", client.ObjectKeyFromObject(m).String())
	return ctrl.LoggerInto(ctx, log)
}

// WriteResponse writes the outcome as an UpdateMachine hook response (upstream's
// semantics: Success with retryAfterSeconds > 0 is in progress, 0 done; Failure has no
// retry). The hook's wire format has no cause: only in-process callers see it.
func (o Outcome) WriteResponse(resp *runtimehooksv1.UpdateMachineResponse) {
	resp.Message = o.Message
	resp.RetryAfterSeconds = o.RetryAfterSeconds
	if o.Failed() {
		resp.Status = runtimehooksv1.ResponseStatusFailure
		resp.RetryAfterSeconds = 0
		return
	}
	resp.Status = runtimehooksv1.ResponseStatusSuccess
}

func logOutcome(ctx context.Context, out Outcome) {
	log := ctrl.LoggerFrom(ctx)
	if out.Failed() {
		log.Info("In-place update failed", "outcome", out.Kind, "cause", out.Cause, "message", out.Message)
		return
	}
	log.V(1).Info("In-place update step", "outcome", out.Kind, "message", out.Message, "retryAfterSeconds", out.RetryAfterSeconds)
}

// lingerPoll is the pause between two checks of a lingering call.
const lingerPoll = 250 * time.Millisecond

// lingerUpdate runs update and, while the answer is the short-update "call back in
// 1 s" (waitRetry's first window: the agent or the node's gates are being waited
// for), repeats it until Linger has passed. Every repetition is the same idempotent
// step, so lingering changes how soon an answer comes, never what it is.
func (c *Coordinator) lingerUpdate(ctx context.Context, d desiredObjects) Outcome {
	// Wall time, not Options.Now: lingering is about how long the call takes.
	deadline := time.Now().Add(c.opts.Linger)
	for {
		out := c.update(ctx, d)
		if out.Kind != OutcomeInProgress || out.RetryAfterSeconds != waitRetry(0) || !time.Now().Add(lingerPoll).Before(deadline) {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(lingerPoll):
		}
	}
}

// OutcomeKind is what one call's answer means.
type OutcomeKind string

const (
	// OutcomeInProgress: call again after RetryAfterSeconds.
	OutcomeInProgress OutcomeKind = "InProgress"
	// OutcomeDone: the node runs the desired state and passed its gates.
	OutcomeDone OutcomeKind = "Done"
	// OutcomeFailedFinal: the node update of this desired state is over and failed;
	// calling again answers the same until the spec changes or an operator acts.
	OutcomeFailedFinal OutcomeKind = "FailedFinal"
	// OutcomeFailedRetryable: a failure around the node (an API error, a plan that
	// cannot be built yet, a refused request, a blocked drain); calling again may
	// succeed once the cause is gone.
	OutcomeFailedRetryable OutcomeKind = "FailedRetryable"
)

// Cause is the typed cause of a failure.
type Cause string

const (
	// CauseRolledBack: the agent rolled the node back; it is back in service.
	CauseRolledBack Cause = "RolledBack"
	// CauseAgentFailed: the agent refused the plan or failed before changing the node.
	CauseAgentFailed Cause = "AgentFailed"
	// CauseDegraded: the node's rollback failed or its journal is corrupt; it stays
	// cordoned and needs manual repair.
	CauseDegraded Cause = "Degraded"
	// CausePlanNotPickedUp: the agent reported nothing for the plan within the
	// pick-up deadline (Deadlines.Pickup); the plan was withdrawn and the node
	// uncordoned.
	CausePlanNotPickedUp Cause = "PlanNotPickedUp"
	// CauseDrainTimeout: the drain stayed blocked past its timeout (node cordoned).
	CauseDrainTimeout Cause = "DrainTimeout"
	// CauseRequestRejected: the request does not match the stored objects, or the
	// Machine is not marked for an in-place update, or its namespace did not opt in.
	CauseRequestRejected Cause = "RequestRejected"
	// CauseInvalidInput: the desired objects cannot be turned into a node plan.
	CauseInvalidInput Cause = "InvalidInput"
	// CauseInvalidStatus: the agent's status annotation does not decode.
	CauseInvalidStatus Cause = "InvalidStatus"
	// CauseNodeMissing: the Machine's node does not exist in its workload cluster.
	CauseNodeMissing Cause = "NodeMissing"
	// CauseManagementAPI, CauseWorkloadAPI: an API server refused or failed a call.
	CauseManagementAPI Cause = "ManagementAPI"
	CauseWorkloadAPI   Cause = "WorkloadAPI"
)

// Outcome is the typed answer of one call; UpdateMachine writes it into the hook
// response. Message is for humans only.
type Outcome struct {
	Kind              OutcomeKind
	Cause             Cause
	RetryAfterSeconds int32
	Message           string
	// live: the view reading from caches cannot answer; the call reads live.
	live bool
	// offline: the workload cluster's API server did not answer (watchOffline).
	offline bool
}

// Failed reports whether the outcome is a Failure answer.
func (o Outcome) Failed() bool {
	return o.Kind == OutcomeFailedFinal || o.Kind == OutcomeFailedRetryable
}

// Every Outcome is built here, and its message redacted here: it reaches the hook
// response, logs and, on the single-node path, conditions and Events, and it may
// quote errors that carry secret values (a password hash in a rendered file).
func inProgress(retry int32, msg string) Outcome {
	return Outcome{Kind: OutcomeInProgress, RetryAfterSeconds: retry, Message: protocol.RedactKnownSecrets(msg)}
}
func done(msg string) Outcome {
	return Outcome{Kind: OutcomeDone, Message: protocol.RedactKnownSecrets(msg)}
}
func final(cause Cause, msg string) Outcome {
	return Outcome{Kind: OutcomeFailedFinal, Cause: cause, Message: protocol.RedactKnownSecrets(msg)}
}
func retryable(cause Cause, msg string) Outcome {
	return Outcome{Kind: OutcomeFailedRetryable, Cause: cause, Message: protocol.RedactKnownSecrets(msg)}
}
func rejected(msg string) Outcome { return retryable(CauseRequestRejected, msg) }
func needsLive() Outcome          { return Outcome{live: true} }

func (c *Coordinator) drainOptions() drain.Options {
	return drain.Options{Budget: c.opts.Drain.AttemptBudget, Force: c.opts.Drain.Force}
}

// CELGatesResolver says whether the policy gives a Machine of a cluster a CEL
// gate; Options.Gates implements it when it is a *policy.Policy. The agent
// installed in the cluster may list pods only then (agentinstall.Config.CELGates).
type CELGatesResolver interface {
	CELGates(namespace, cluster string) bool
}

func (c *Coordinator) agentConfig(cluster *clusterv1.Cluster) agentinstall.Config {
	cfg := agentinstall.Config{Image: c.opts.AgentImage, Args: c.opts.AgentArgs}
	if cluster != nil && cluster.Spec.ControlPlaneEndpoint.IsValid() {
		cfg.APIServerHost, cfg.APIServerPort = cluster.Spec.ControlPlaneEndpoint.Host, cluster.Spec.ControlPlaneEndpoint.Port
	}
	if r, ok := c.opts.Gates.(CELGatesResolver); ok && cluster != nil {
		cfg.CELGates = r.CELGates(cluster.Namespace, cluster.Name)
	}
	return cfg
}
