package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ErrRebooted is returned by a Rebooter that rebooted the node without ending the
// process (the simulated host): the executor continues as after a restart.
var ErrRebooted = errors.New("node rebooted")

// Rebooter reboots the node and identifies boots.
type Rebooter interface {
	// Reboot reboots the node. A real reboot does not return before the process is
	// killed; the simulated host returns ErrRebooted once the new boot happened.
	Reboot(ctx context.Context) error
	// BootID identifies the current boot.
	BootID(ctx context.Context) (string, error)
}

// Reporter publishes status; Report must not block.
type Reporter interface {
	Report(s protocol.NodeStatus)
}

// GateRunner runs the plan's health gates (gate.Checker).
type GateRunner interface {
	Run(ctx context.Context, p *protocol.NodePlan) error
}

// Backends resolves an OS backend by name.
type Backends func(name string) (backend.Backend, error)

// Executor performs a plan's actions. Its fields are its dependencies; all are
// required except Log. Every call of a dependency on behalf of an action carries
// the action's key in its context (ActionFrom).
type Executor struct {
	Journal  journal.Journal
	Kube     Host
	Gates    GateRunner
	Backends Backends
	Rebooter Rebooter
	Reporter Reporter
	Now      func() time.Time
	Log      logr.Logger
	// After is time.After unless set (tests shorten the pauses between
	// runs of a failing rollback action).
	After func(time.Duration) <-chan time.Time
}

// Load returns the journal's state and plan; a zero state when the journal is empty.
func (x *Executor) Load() (state.State, *protocol.NodePlan, error) {
	e, err := x.Journal.Load()
	if err != nil {
		return state.State{}, nil, err
	}
	return decodeEntry(e)
}

// StateOf decodes the state machine's state from a journal entry (a zero state
// for an empty journal).
func StateOf(e journal.Entry) (state.State, error) {
	st, _, err := decodeEntry(e)
	return st, err
}

func decodeEntry(e journal.Entry) (state.State, *protocol.NodePlan, error) {
	var st state.State
	if len(e.State) > 0 {
		if err := json.Unmarshal(e.State, &st); err != nil {
			return state.State{}, nil, fmt.Errorf("%w: state: %w", journal.ErrCorrupt, err)
		}
	}
	var plan *protocol.NodePlan
	if len(e.Plan) > 0 {
		p, err := protocol.DecodePlan(e.Plan)
		if err != nil {
			return state.State{}, nil, fmt.Errorf("%w: plan: %w", journal.ErrCorrupt, err)
		}
		plan = p
	}
	return st, plan, nil
}

// Runs returns the journal's per-action run counters for the current plan.
func (x *Executor) Runs() (map[string]int, error) {
	e, err := x.Journal.Load()
	if err != nil {
		return nil, err
	}
	return e.Runs, nil
}

// Reject records a plan that cannot be applied, without touching the node.
func (x *Executor) Reject(hash, reason, message string) (state.State, error) {
	e, err := x.Journal.Load()
	if err != nil {
		return state.State{}, err
	}
	cur, _, err := decodeEntry(e)
	if err != nil {
		return state.State{}, err
	}
	st, _, err := state.Step(cur, state.PlanRejected{Hash: hash, Reason: reason, Message: message, At: x.Now()})
	if err != nil {
		return cur, err
	}
	e.Reset(hash, nil)
	if err := x.save(&e, st); err != nil {
		return st, err
	}
	x.report(st)
	return st, nil
}

// Start begins an admitted plan and runs it to a terminal phase, not knowing the
// node's Kubernetes version before it (see StartFrom).
func (x *Executor) Start(ctx context.Context, p *protocol.NodePlan) (state.State, error) {
	return x.StartFrom(ctx, p, "")
}

// StartFrom is Start on a node whose kubelet reports fromVersion (empty:
// unknown): with the last committed plan, it tells whether the update changes
// what etcd stores (etcdChange), so whether a rollback restores etcd.
func (x *Executor) StartFrom(ctx context.Context, p *protocol.NodePlan, fromVersion string) (state.State, error) {
	hash, err := p.Hash()
	if err != nil {
		return state.State{}, err
	}
	desired, err := p.DesiredState()
	if err != nil {
		return state.State{}, err
	}
	raw, err := protocol.EncodePlan(p)
	if err != nil {
		return state.State{}, err
	}
	b, err := x.backendFor(p)
	if err != nil {
		return state.State{}, err
	}
	e, err := x.Journal.Load()
	if err != nil {
		return state.State{}, err
	}
	cur, _, err := decodeEntry(e)
	if err != nil {
		return state.State{}, err
	}
	spec := state.SpecFor(p, b.Capabilities())
	if spec.OS && imageBooted(ctx, b, p) {
		// The node already runs the plan's image: staging, activating and
		// rebooting into it again would only take the node down for nothing.
		x.Log.Info("The plan's OS image is already booted; no OS actions, no reboot", "plan", hash, "backend", b.Name())
		spec.OS = false
	}
	spec.ControlPlaneConfig = clusterConfigChanged(e.Committed, p)
	spec = spec.EtcdRollback(p.Kubernetes.EtcdRestore, etcdChange(e.Committed, p, fromVersion))
	before := ""
	if spec.OS && spec.Caps.NeedsReboot && cur.PlanHash != hash {
		// What a rollback returns to: one that finds it running and booting
		// next does not reboot into it again (state.ImageObserved).
		before = x.bootedImage(ctx, b)
	}
	st, _, err := state.Step(cur, state.PlanObserved{Hash: hash, DesiredState: desired, Spec: spec, ImageBefore: before, At: x.Now()})
	if err != nil {
		return cur, err
	}
	if e.Key != hash {
		e.Reset(hash, raw)
	}
	if e.Attempt == "" {
		e.Attempt = journal.NewAttempt(hash, e.Seq)
	}
	if err := x.save(&e, st); err != nil {
		return st, err
	}
	// Finished attempts' files go before the new one writes anything; the last
	// committed attempt's stay until this one commits.
	x.collect(e.Attempt, e.CommittedAttempt)
	x.Log.Info("Starting plan", "plan", hash, "attempt", e.Attempt, "actions", len(st.Actions))
	return x.Resume(ctx)
}

// Resume continues the plan in the journal until it reaches a terminal phase, the
// context ends, or the journal cannot be written.
func (x *Executor) Resume(ctx context.Context) (state.State, error) {
	e, st, plan, err := x.inProgress()
	if err != nil || plan == nil {
		return st, err
	}
	log := x.Log.WithValues("plan", st.PlanHash, "attempt", e.Attempt)
	boot, err := x.Rebooter.BootID(ctx)
	if err != nil {
		return st, fmt.Errorf("read boot ID: %w", err)
	}
	if e.InFlight != "" {
		log.Info("Repeating the action that was in flight", "action", e.InFlight)
	}
	st, out, err := state.Step(st, state.Resumed{BootID: boot})
	if err != nil {
		return st, err
	}
	e.Finish()
	if err := x.save(&e, st); err != nil {
		return st, err
	}
	x.report(st)
	return x.drive(ctx, log, &e, st, out, plan, boot)
}

// RollBack fails the plan in progress at the action it runs next, for reason
// and message, and runs its rollback to a terminal phase, journaling every step
// as Resume does; a plan already rolling back carries on with its rollback, a
// finished one is left as it is. The action that was in flight is not repeated:
// it is the one that failed (and, if it never started, the rollback treats it
// as not started). The rescue pod calls it when the node's API server did not
// come back: no rollback action needs the API server.
func (x *Executor) RollBack(ctx context.Context, reason, message string) (state.State, error) {
	e, st, plan, err := x.inProgress()
	if err != nil || plan == nil {
		return st, err
	}
	log := x.Log.WithValues("plan", st.PlanHash, "attempt", e.Attempt)
	boot, err := x.Rebooter.BootID(ctx)
	if err != nil {
		return st, fmt.Errorf("read boot ID: %w", err)
	}
	st, out, err := state.Step(st, state.Resumed{BootID: boot})
	if err != nil {
		return st, err
	}
	if cur, ok := st.CurrentAction(); ok && st.Phase != protocol.PhaseRollingBack {
		log.Info("Rolling back", "failedAction", cur.Key(), "wasInFlight", e.InFlight == cur.Key(), "reason", reason)
		st, out, err = state.Step(st, state.ActionFailed{Name: cur.Name, Reason: reason, Message: message, Unchanged: e.InFlight != cur.Key()})
		if err != nil {
			return st, err
		}
	} else if e.InFlight != "" {
		log.Info("Repeating the rollback action that was in flight", "action", e.InFlight)
	}
	e.Finish()
	if err := x.save(&e, st); err != nil {
		return st, err
	}
	x.report(st)
	return x.drive(ctx, log, &e, st, out, plan, boot)
}

// inProgress loads the journal's plan in progress; a nil plan (and no error)
// when there is none, or it is finished.
func (x *Executor) inProgress() (journal.Entry, state.State, *protocol.NodePlan, error) {
	e, err := x.Journal.Load()
	if err != nil {
		return e, state.State{}, nil, err
	}
	st, plan, err := decodeEntry(e)
	if err != nil || st.PlanHash == "" || st.Phase.Terminal() {
		return e, st, nil, err
	}
	if plan == nil {
		return e, st, nil, fmt.Errorf("%w: plan %s is in progress but its plan is missing", journal.ErrCorrupt, st.PlanHash)
	}
	if e.Attempt == "" {
		// A journal of an agent before attempts: this attempt gets an ID now.
		e.Attempt = journal.NewAttempt(st.PlanHash, e.Seq)
	}
	return e, st, plan, nil
}

// drive runs the state's actions from out on, journaling each, until a terminal
// phase, the context ends, or the journal cannot be written. boot is the
// current boot's ID.
func (x *Executor) drive(ctx context.Context, log logr.Logger, e *journal.Entry, st state.State, out state.Output, plan *protocol.NodePlan, boot string) (state.State, error) {
	var err error
	for {
		if out.AwaitBoot {
			log.Info("Rebooting the node")
			rctx := ctx
			if e.InFlight != "" {
				// The reboot action in flight (not after a restart, which
				// finished it and reissues the reboot).
				rctx = WithAction(ctx, e.InFlight)
			}
			err := x.Rebooter.Reboot(rctx)
			switch {
			case errors.Is(err, ErrRebooted):
				if boot, err = x.Rebooter.BootID(ctx); err != nil {
					return st, fmt.Errorf("read boot ID: %w", err)
				}
				st, out, err = state.Step(st, state.Resumed{BootID: boot})
				if err != nil {
					return st, err
				}
				e.Finish()
			case err != nil && ctx.Err() == nil:
				st, out, err = state.Step(st, state.ActionFailed{Name: state.ActReboot, Reason: state.ReasonActionFailed, Message: err.Error()})
				if err != nil {
					return st, err
				}
				e.Finish()
			default:
				// A real reboot is under way: wait to be killed.
				<-ctx.Done()
				return st, ctx.Err()
			}
			if err := x.save(e, st); err != nil {
				return st, err
			}
			x.report(st)
			continue
		}
		if out.Next == nil {
			x.disarmRescue(st)
			log.Info("Plan finished", "phase", st.Phase, "reason", st.Reason)
			return st, nil
		}
		a := *out.Next
		if out.After > 0 {
			log.Info("Running a failed rollback action again after a pause", "action", a.Key(), "failures", a.Failures, "after", out.After)
			if err := x.pause(ctx, out.After); err != nil {
				return st, err
			}
		}
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		if a.Name == state.ActReboot && a.Rollback {
			skipped, next, nout, err := x.observeImage(ctx, log, plan, st)
			if err != nil {
				return st, err
			}
			if skipped {
				st, out = next, nout
				if err := x.save(e, st); err != nil {
					return st, err
				}
				x.report(st)
				continue
			}
		}
		e.Begin(a.Key())
		if err := x.save(e, st); err != nil {
			return st, err
		}
		// The rescue pod is in place before the action can change what the
		// node boots into; an action that cannot have it does not run.
		armErr := x.armRescue(st, e.Attempt)
		if a.Name == state.ActReboot && armErr == nil {
			st, out, err = state.Step(st, state.RebootIssued{BootID: boot})
			if err != nil {
				return st, err
			}
			if err := x.save(e, st); err != nil {
				return st, err
			}
			x.report(st)
			continue
		}
		log.V(1).Info("Running action", "action", a.Key())
		began := x.Now()
		actErr := armErr
		etcdMembers := 0
		// The action's logger travels with ctx: a long command logs its output.
		actx := logr.NewContext(WithAction(ctx, a.Key()), log.WithValues("action", a.Key()))
		switch {
		case armErr != nil:
		case a.Name == state.ActEtcdSnapshot && !a.Rollback:
			etcdMembers, actErr = x.Kube.EtcdSnapshot(actx, e.Attempt)
		default:
			actErr = x.perform(actx, e.Attempt, plan, st, a)
		}
		if ctx.Err() != nil {
			// Interrupted, not failed: Resume repeats the action.
			return st, ctx.Err()
		}
		// Each action's duration in the node's log: where an update's time goes
		// (kubeadm's upgrade, a gate's wait) without a profiler on the node.
		took := x.Now().Sub(began).Round(time.Millisecond)
		var ev state.Event = state.ActionSucceeded{Name: a.Name, EtcdMembers: etcdMembers}
		if actErr == nil {
			log.Info("Action done", "action", a.Key(), "took", took.String())
		} else {
			log.Info("Action failed", "action", a.Key(), "took", took.String(), "error", actErr.Error())
			failed := state.ActionFailed{Name: a.Name, Reason: reasonOf(actErr), Message: actErr.Error(),
				Unchanged: armErr != nil || errors.Is(actErr, kube.ErrNodeUnchanged)}
			if ge := (*gate.Error)(nil); errors.As(actErr, &ge) {
				failed.Gate = ge.Gate
			}
			ev = failed
		}
		if st, out, err = state.Step(st, ev); err != nil {
			return st, err
		}
		e.Finish()
		if st.Phase == protocol.PhaseCommitted {
			e.Committed, e.CommittedAttempt = e.Plan, e.Attempt
		}
		if err := x.save(e, st); err != nil {
			return st, err
		}
		if st.Phase == protocol.PhaseCommitted {
			x.collect(e.Attempt)
		}
		x.report(st)
	}
}

// pause waits d, or until ctx ends: an interrupted pause is resumed from the
// journal, which runs the action at once.
func (x *Executor) pause(ctx context.Context, d time.Duration) error {
	after := x.After
	if after == nil {
		after = time.After
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-after(d):
		return nil
	}
}

// armRescue puts the rescue static pod in place when the state about to run
// its next action wants it (state.RescueWanted).
func (x *Executor) armRescue(st state.State, attempt string) error {
	if !st.RescueWanted() {
		return nil
	}
	if err := x.Kube.ArmRescue(attempt); err != nil {
		return fmt.Errorf("put the rescue static pod in place: %w", err)
	}
	return nil
}

// disarmRescue removes the rescue static pod once the state no longer wants
// it. A failure is logged, not fatal: the pod finds nothing to do and the
// agent removes it again when it next starts (agentcmd's claimHost).
func (x *Executor) disarmRescue(st state.State) {
	if st.RescueWanted() {
		return
	}
	if err := x.Kube.DisarmRescue(); err != nil {
		x.Log.Error(err, "Removing the rescue static pod failed")
	}
}

// collect removes the work directories of attempts other than keep; a failure
// only costs disk space, so it is logged, not fatal.
func (x *Executor) collect(keep ...string) {
	if err := x.Kube.CollectAttempts(keep...); err != nil {
		x.Log.Error(err, "Removing finished attempts' files failed", "keep", keep)
	}
}

func reasonOf(err error) string {
	var ge *gate.Error
	switch {
	case kube.IsDiskFull(err):
		return state.ReasonDiskFull
	case errors.As(err, &ge):
		return state.ReasonGateFailed
	case errors.Is(err, backend.ErrArtifactRefused):
		return state.ReasonArtifactRefused
	}
	return state.ReasonActionFailed
}

func (x *Executor) backendFor(p *protocol.NodePlan) (backend.Backend, error) {
	name := "none"
	if p.OS != nil {
		name = p.OS.Backend
	}
	b, err := x.Backends(name)
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", name, err)
	}
	return b, nil
}

// bootedImage names the image the node runs, as the plan's backend reports it
// (backend.Status.Booted); empty when the backend cannot say, which only costs a
// rollback's reboot that might have been skipped.
func (x *Executor) bootedImage(ctx context.Context, b backend.Backend) string {
	st, err := b.Status(ctx)
	if err != nil {
		x.Log.Info("Reading the booted OS image failed; a rollback will reboot", "backend", b.Name(), "error", err.Error())
		return ""
	}
	return st.Booted
}

// observeImage feeds the OS backend's status to the state when the rollback's
// reboot is due (state.ImageObserved) and reports whether the state skipped the
// reboot, with the state and output after it. The observation only reads: an
// agent that dies before the skip is journaled observes again when it resumes.
// A backend that cannot report leaves the reboot in place.
func (x *Executor) observeImage(ctx context.Context, log logr.Logger, plan *protocol.NodePlan, st state.State) (bool, state.State, state.Output, error) {
	b, err := x.backendFor(plan)
	var status backend.Status
	if err == nil {
		status, err = b.Status(ctx)
	}
	if ctx.Err() != nil {
		// Interrupted: Resume observes again.
		return false, st, state.Output{}, ctx.Err()
	}
	if err != nil {
		log.Info("Reading the booted OS image failed; the rollback reboots", "error", err.Error())
		return false, st, state.Output{}, nil
	}
	next, out, err := state.Step(st, state.ImageObserved{Booted: status.Booted, Staged: status.Staged})
	if err != nil {
		return false, st, state.Output{}, err
	}
	if cur, ok := next.CurrentAction(); ok && cur.Name == state.ActReboot && cur.Rollback {
		log.Info("The rollback reboots", "booted", status.Booted, "staged", status.Staged, "imageBefore", st.ImageBefore)
		return false, st, state.Output{}, nil
	}
	log.Info("The image from before the update runs and boots next; the rollback does not reboot", "booted", status.Booted)
	return true, next, out, nil
}

// imageBooted reports whether the node already runs the plan's OS image, as the
// backend itself judges it (Verify: "the node runs this image"; each backend
// identifies images its own way, which Status().Booted only names). Any error,
// ErrVerifyFailed or another, counts as not booted: the OS actions then run and
// report what is wrong.
func imageBooted(ctx context.Context, b backend.Backend, p *protocol.NodePlan) bool {
	if p.OS == nil {
		return false
	}
	return b.Verify(ctx, backend.Artifact{Ref: p.OS.Ref, Digest: p.OS.Digest}) == nil
}

// perform runs one action of the attempt (every action but etcd-snapshot, which
// also returns the member count); st is the attempt's state as the journal holds
// it (its spec, the image it started from).
func (x *Executor) perform(ctx context.Context, attempt string, p *protocol.NodePlan, st state.State, a state.Action) error {
	spec := st.Spec
	var artifact backend.Artifact
	if p.OS != nil {
		artifact = backend.Artifact{Ref: p.OS.Ref, Digest: p.OS.Digest}
	}
	b, err := x.backendFor(p)
	if err != nil {
		return err
	}
	switch a.Name {
	case state.ActBackendStage:
		return b.Stage(ctx, artifact)
	case state.ActBackendActivate:
		return b.Activate(ctx, artifact)
	case state.ActBackendVerify:
		return b.Verify(ctx, artifact)
	case state.ActBackupFiles:
		return x.Kube.Backup(ctx, attempt, x.Kube.BackupSet(p))
	case state.ActWriteFiles:
		return x.Kube.WriteFiles(ctx, p.Files)
	case state.ActApplyUsers:
		return x.Kube.ApplyUsers(ctx, p.Users)
	case state.ActApplyNTP:
		return x.Kube.ApplyNTP(ctx, p.NTP)
	case state.ActKubeletConfig:
		return x.Kube.KubeletFlags(ctx, p.KubeletExtraArgs)
	case state.ActControlPlaneConfig:
		return x.Kube.ControlPlaneConfig(ctx, p)
	case state.ActInstallKubeadm:
		return x.Kube.InstallKubeadm(ctx, p.Kubernetes)
	case state.ActKubeadmUpgrade:
		return x.Kube.KubeadmUpgrade(ctx, p.Kubernetes)
	case state.ActInstallKubelet:
		return x.Kube.InstallKubelet(ctx, p.Kubernetes)
	case state.ActInstallBinaries:
		if err := x.Kube.InstallKubelet(ctx, p.Kubernetes); err != nil {
			return err
		}
		return x.Kube.InstallKubeadm(ctx, p.Kubernetes)
	case state.ActRestartKubelet:
		return x.Kube.RestartKubelet(ctx)
	case state.ActGates:
		return x.Gates.Run(ctx, p)
	case state.ActBackendCommit:
		return b.Commit(ctx, artifact)
	case state.ActRestoreFiles:
		if spec.OS && spec.Caps.NeedsReboot {
			// The image rollback ran first and takes effect at the reboot that
			// ends this rollback: what the image owns (a read-only /usr) comes
			// back with it.
			return x.Kube.RestoreWithImageRollback(ctx, attempt)
		}
		return x.Kube.Restore(ctx, attempt)
	case state.ActRestoreEtcd:
		return x.Kube.RestoreEtcd(ctx, attempt)
	case state.ActBackendRollback:
		return b.Rollback(ctx, artifact)
	case state.ActVerifyRollback:
		return verifyRollback(ctx, b, artifact, st.ImageBefore)
	}
	return fmt.Errorf("unknown action %s", a.Name)
}

// ErrRollbackNotBooted: after the reboot that ends an image rollback, the node
// does not run the image it ran before the plan.
var ErrRollbackNotBooted = errors.New("the node does not run the image it ran before the update")

// verifyRollback checks that an image rollback took (state.ActVerifyRollback):
// the node runs before, the image the plan started from, as Status names it (the
// name the state compared when it skipped the rollback's reboot); when that was
// not recorded, at least not the plan's image, as the backend judges it (Verify).
func verifyRollback(ctx context.Context, b backend.Backend, planImage backend.Artifact, before string) error {
	if before == "" {
		if b.Verify(ctx, planImage) == nil {
			return fmt.Errorf("%w: it runs the update's image %s", ErrRollbackNotBooted, planImage.Ref)
		}
		return nil
	}
	status, err := b.Status(ctx)
	if err != nil {
		return fmt.Errorf("read the booted image: %w", err)
	}
	if status.Booted != before {
		return fmt.Errorf("%w: it runs %s, not %s", ErrRollbackNotBooted, status.Booted, before)
	}
	return nil
}

func (x *Executor) save(e *journal.Entry, st state.State) error {
	raw, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	e.State = raw
	if err := x.Journal.Save(*e); err != nil {
		if kube.IsDiskFull(err) {
			x.reportDiskFull(st, err)
		}
		return err
	}
	e.Seq++
	return nil
}

// reportDiskFull says on the Node that the plan is stuck because the journal
// cannot be written: the agent retries (the plan resumes from the last saved
// entry once there is room), but never silently.
func (x *Executor) reportDiskFull(st state.State, err error) {
	if st.PlanHash == "" {
		return
	}
	s := st.Status()
	s.Reason = protocol.ReasonDiskFull
	s.Message = fmt.Sprintf("the host's disk is full: the agent cannot write its journal (%v); it retries and resumes once there is room", err)
	s.UpdatedAt = x.Now().UTC().Truncate(time.Second)
	s.StartedAt = s.StartedAt.UTC().Truncate(time.Second)
	x.Reporter.Report(s)
}

func (x *Executor) report(st state.State) {
	s := st.Status()
	s.UpdatedAt = x.Now().UTC().Truncate(time.Second)
	s.StartedAt = s.StartedAt.UTC().Truncate(time.Second)
	x.Reporter.Report(s)
}

// Forget clears a terminal, not committed plan from the journal, so that the
// same plan can be tried again when the coordinator asks for it anew.
func (x *Executor) Forget() error {
	e, err := x.Journal.Load()
	if err != nil {
		return err
	}
	st, _, err := decodeEntry(e)
	if err != nil {
		return err
	}
	if st.PlanHash == "" || !st.Phase.Terminal() || st.Phase == protocol.PhaseCommitted {
		return nil
	}
	e.Reset("", nil)
	e.State = nil
	return x.Journal.Save(e)
}

// clusterConfigChanged reports whether the plan's ClusterConfiguration differs
// from the last committed plan's; true when nothing was committed on this node yet.
func clusterConfigChanged(committed json.RawMessage, p *protocol.NodePlan) bool {
	if len(p.ClusterConfiguration) == 0 {
		return false
	}
	if len(committed) == 0 {
		return true
	}
	prev, err := protocol.DecodePlan(committed)
	if err != nil {
		return true
	}
	return !sameJSON(prev.ClusterConfiguration, p.ClusterConfiguration)
}

// etcdChange is what the node knows of the plan's change to etcd's data: the
// version before is the last committed plan's, else the kubelet's; the etcd
// image tag the plan names is compared with the committed plan's. Without a
// committed plan, a tag the plan names cannot be compared with what the node
// runs (its kubeadm init may have pinned another).
func etcdChange(committed json.RawMessage, p *protocol.NodePlan, kubeletVersion string) protocol.EtcdChange {
	c := protocol.EtcdChange{FromVersion: kubeletVersion, ToVersion: p.Kubernetes.Version, ToEtcdImageTag: protocol.EtcdImageTag(p.ClusterConfiguration)}
	prev, err := protocol.DecodePlan(committed)
	if len(committed) == 0 || err != nil {
		c.FromEtcdUnknown = c.ToEtcdImageTag != ""
		return c
	}
	c.FromVersion = prev.Kubernetes.Version
	c.FromEtcdImageTag = protocol.EtcdImageTag(prev.ClusterConfiguration)
	return c
}

// sameJSON reports whether two JSON documents hold the same value, whatever their
// key order and spacing (a plan may be encoded by another coordinator version);
// one that does not decode differs from everything.
func sameJSON(a, b json.RawMessage) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
