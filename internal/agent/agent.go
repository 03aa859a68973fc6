package agent

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/journal"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Agent follows one node's desired plan.
type Agent struct {
	NodeName string
	Client   kubernetes.Interface
	Executor *executor.Executor
	// Host is the executor's Kubernetes layer as built (the executor may hold it
	// wrapped): the default Stager stages into its root and feeds its binaries.
	Host     *kube.Host
	Reporter *Reporter
	// Backends are the OS backend names this agent has (for admission).
	Backends []string
	// Key is the node's private key (LoadOrCreateNodeKey): plans are sealed to it.
	Key *ecdh.PrivateKey
	// Stager stages a plan the coordinator names before it cordons the node; nil
	// stages nothing (the coordinator then waits: wire one in every agent).
	Stager *Stager
	Log    logr.Logger

	kick chan struct{}
}

// Run resumes the journal's plan, then follows the watches until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.Key == nil {
		return errors.New("the agent has no node key")
	}
	a.kick = make(chan struct{}, 1)
	release, err := a.defaultStager()
	if err != nil {
		return err
	}
	defer release()
	go a.Reporter.Run(ctx)

	nodeInformer := cache.NewSharedIndexInformer(byName(a.Client.CoreV1().Nodes(), a.NodeName), &corev1.Node{}, 0, cache.Indexers{})
	secretInformer := cache.NewSharedIndexInformer(byName(a.Client.CoreV1().Secrets(inplacev1.AgentNamespace), inplacev1.PlanSecretName(a.NodeName)),
		&corev1.Secret{}, 0, cache.Indexers{})
	nodeLister := corelisters.NewNodeLister(nodeInformer.GetIndexer())
	secretLister := corelisters.NewSecretLister(secretInformer.GetIndexer())
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.trigger() },
		UpdateFunc: func(any, any) { a.trigger() },
		DeleteFunc: func(any) { a.trigger() },
	}
	if _, err := nodeInformer.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch node: %w", err)
	}
	if _, err := secretInformer.AddEventHandler(handler); err != nil {
		return fmt.Errorf("watch plan secret: %w", err)
	}
	go nodeInformer.Run(ctx.Done())
	go secretInformer.Run(ctx.Done())

	// The journal first: a plan in progress continues even with no API server.
	if st, err := a.Executor.Resume(ctx); errors.Is(err, journal.ErrCorrupt) {
		return a.refuse(ctx, nodeLister, nodeInformer.HasSynced, err)
	} else if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("resume from the journal: %w", err)
	} else if st.PlanHash != "" {
		a.Log.Info("Journal plan is finished", "plan", st.PlanHash, "phase", st.Phase)
	}

	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.HasSynced, secretInformer.HasSynced) {
		return nil
	}
	for {
		node, err := nodeLister.Get(a.NodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read node: %w", err)
		}
		secret, err := secretLister.Secrets(inplacev1.AgentNamespace).Get(inplacev1.PlanSecretName(a.NodeName))
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("read plan secret: %w", err)
		}
		if err := a.reconcile(ctx, node, secret); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrNodeConfigChanged) {
				return err
			}
			a.Log.Error(err, "Reconcile failed", "node", a.NodeName)
			// A journal error or a failed key publication; retry later rather than spin.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Second):
				a.trigger()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		}
	}
}

func (a *Agent) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// reconcile decides what to do with the Node's desired plan.
func (a *Agent) reconcile(ctx context.Context, node *corev1.Node, secret *corev1.Secret) error {
	if node == nil {
		return nil
	}
	if err := a.publishKey(ctx, node); err != nil {
		return err
	}
	if a.Stager != nil {
		if err := a.Stager.Reconcile(ctx, node, secret, a.Key); err != nil {
			return err
		}
	}
	desired := node.Annotations[inplacev1.DesiredPlanAnnotation]
	st, _, err := a.Executor.Load()
	if err != nil {
		return err
	}
	if desired == "" {
		// The coordinator withdrew its plan: a failed plan may be asked for again.
		return a.Executor.Forget()
	}
	if st.PlanHash == desired && !st.Phase.Terminal() {
		_, err := a.Executor.Resume(ctx)
		return err
	}
	if st.PlanHash == desired {
		retried, err := a.verdictCleared(ctx, node, st)
		if err != nil {
			return err
		}
		if !retried {
			a.ensureReported(node, st)
			return nil
		}
		// The plan was withdrawn and asked for again while this agent did not
		// watch (down, or between two reads): start it afresh.
		a.Log.Info("Retrying plan: its verdict was cleared on the Node", "plan", desired, "phase", st.Phase)
		if err := a.Executor.Forget(); err != nil {
			return err
		}
	}
	if node.Annotations[inplacev1.CurrentPlanAnnotation] == desired {
		return nil // committed before this journal existed
	}
	log := a.Log.WithValues("plan", desired)
	if secret == nil {
		a.Reporter.Report(pending(desired, fmt.Sprintf("waiting for the plan Secret %s/%s", inplacev1.AgentNamespace, inplacev1.PlanSecretName(a.NodeName))))
		return nil
	}
	sealed, err := protocol.DecodeSealedPlan(secret.Data[inplacev1.PlanSecretDataKey])
	if errors.Is(err, protocol.ErrPlanNewerThanAgent) {
		a.waitForNewerAgent(desired, err)
		return nil
	}
	if err != nil {
		// The Node and Secret watches are separate streams: the Node's new desired
		// plan can arrive before the Secret written ahead of it. A rejection is
		// journaled against the desired hash for good, so it is decided on the
		// Secret as stored, never on a copy that may lag.
		stored, getErr := a.Client.CoreV1().Secrets(secret.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
		if getErr != nil {
			return fmt.Errorf("read plan Secret %s/%s before rejecting plan %s: %w", secret.Namespace, secret.Name, desired, getErr)
		}
		if stored.ResourceVersion != secret.ResourceVersion {
			a.Reporter.Report(pending(desired, fmt.Sprintf("waiting for plan %s: the plan Secret changed", desired)))
			return nil
		}
		log.Info("Rejecting plan", "reason", state.ReasonInvalidPlan, "error", err.Error())
		_, err := a.Executor.Reject(desired, state.ReasonInvalidPlan,
			fmt.Sprintf("the plan in Secret %s/%s cannot be used: %v", secret.Namespace, secret.Name, err))
		return err
	}
	if sealed.PlanHash != desired {
		a.Reporter.Report(pending(desired, fmt.Sprintf("waiting for plan %s: the plan Secret holds plan %s", desired, sealed.PlanHash)))
		return nil
	}
	plan, err := sealed.Open(a.Key)
	var otherKey *protocol.SealedToAnotherKeyError
	switch {
	case errors.Is(err, protocol.ErrPlanNewerThanAgent):
		a.waitForNewerAgent(desired, err)
		return nil
	case errors.As(err, &otherKey):
		// Not a rejection: the plan's hash stays the same when the coordinator seals
		// it again to this node's key (its next call does, seeing the new key on the
		// Node), and a journaled failure would stick to that hash.
		log.Info("Plan is sealed to another key", "sealedTo", otherKey.Recipient, "key", otherKey.Have)
		st := pending(desired, fmt.Sprintf("refusing plan %s: %v; waiting for the coordinator to seal it to this node's key", desired, otherKey))
		st.Reason = protocol.ReasonSealedToAnotherKey
		a.Reporter.Report(st)
		return nil
	case err != nil:
		log.Info("Rejecting plan", "reason", state.ReasonInvalidPlan, "error", err.Error())
		_, err := a.Executor.Reject(desired, state.ReasonInvalidPlan,
			fmt.Sprintf("the plan in Secret %s/%s cannot be used: %v", secret.Namespace, secret.Name, err))
		return err
	}
	if r := state.Admit(plan, state.Facts{NodeName: a.NodeName, KubeletVersion: node.Status.NodeInfo.KubeletVersion, Backends: a.Backends}); r != nil {
		log.Info("Rejecting plan", "reason", r.Reason, "message", r.Message)
		_, err := a.Executor.Reject(desired, r.Reason, r.Message)
		return err
	}
	if a.holdBeforeTouch(ctx, desired, plan) {
		return nil
	}
	if ok, err := a.claimPlan(ctx, desired); err != nil || !ok {
		if err == nil {
			log.Info("Not starting plan: the coordinator withdrew it")
		}
		return err
	}
	log.Info("Applying plan", "version", plan.Kubernetes.Version, "action", plan.Kubernetes.Action)
	st, err = a.Executor.StartFrom(ctx, plan, node.Status.NodeInfo.KubeletVersion)
	if errors.Is(err, state.ErrBusy) {
		return nil
	}
	if err != nil {
		return err
	}
	log.Info("Plan finished", "phase", st.Phase, "reason", st.Reason)
	return nil
}

// ensureReported re-reports a finished plan whose status is not on the Node yet
// (the agent stopped between journaling and reporting).
// verdictCleared reports whether the journal's failed verdict on the desired plan
// was cleared on the Node: a retry (the coordinator's, or an operator's by hand)
// withdraws the plan and removes the agent's status, then publishes the plan anew.
// An agent that did not see the withdrawal would otherwise report the old failure
// again. The Node always carries a status for a plan this agent has begun: the
// claim is written before the first action (claim.go). It is read as stored, never
// from the cache, which may predate that claim; a committed plan is never redone.
func (a *Agent) verdictCleared(ctx context.Context, cached *corev1.Node, st state.State) (bool, error) {
	if st.Phase == protocol.PhaseCommitted || !statusGone(cached, st.PlanHash) {
		return false, nil
	}
	node, err := a.Client.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read node %s before retrying plan %s: %w", a.NodeName, st.PlanHash, err)
	}
	return node.Annotations[inplacev1.DesiredPlanAnnotation] == st.PlanHash && statusGone(node, st.PlanHash), nil
}

// statusGone reports whether the Node carries no status about plan: none at all,
// or one about another plan. An unreadable status is not gone (it is reported
// over, never taken for a retry).
func statusGone(node *corev1.Node, plan string) bool {
	raw, ok := node.Annotations[inplacev1.StatusAnnotation]
	if !ok {
		return true
	}
	cur, err := protocol.DecodeStatus(raw)
	return err == nil && cur.PlanHash != plan
}

func (a *Agent) ensureReported(node *corev1.Node, st state.State) {
	cur, err := protocol.DecodeStatus(node.Annotations[inplacev1.StatusAnnotation])
	committedOK := st.Phase != protocol.PhaseCommitted || node.Annotations[inplacev1.CurrentPlanAnnotation] == st.PlanHash
	if err == nil && cur.PlanHash == st.PlanHash && cur.Phase == st.Phase && committedOK {
		return
	}
	s := st.Status()
	s.UpdatedAt = time.Now().UTC().Truncate(time.Second)
	s.StartedAt = s.StartedAt.UTC().Truncate(time.Second)
	a.Reporter.Report(s)
}

func pending(hash, msg string) protocol.NodeStatus {
	return protocol.NodeStatus{V: protocol.StatusVersion, PlanHash: hash, Phase: protocol.PhasePending, Message: msg,
		UpdatedAt: time.Now().UTC().Truncate(time.Second)}
}

// refuse is the agent's answer to a corrupt journal: it cannot know what was done,
// so it changes nothing and reports Failed for whatever plan is desired, until a
// human repairs or removes the journal and restarts it.
func (a *Agent) refuse(ctx context.Context, nodes corelisters.NodeLister, synced cache.InformerSynced, cause error) error {
	a.Log.Error(cause, "Journal is corrupt: refusing to act", "node", a.NodeName)
	if !cache.WaitForCacheSync(ctx.Done(), synced) {
		return nil
	}
	reported := ""
	for {
		if node, err := nodes.Get(a.NodeName); err == nil {
			// The key still goes out: without it the coordinator would wait for it
			// instead of publishing the plan this node then reports Failed for.
			if err := a.publishKey(ctx, node); err != nil {
				a.Log.Error(err, "Publishing the node key failed; retrying on the next Node event", "node", a.NodeName)
			}
			if desired := node.Annotations[inplacev1.DesiredPlanAnnotation]; desired != "" && desired != reported {
				a.Reporter.Report(protocol.NodeStatus{V: protocol.StatusVersion, PlanHash: desired, Phase: protocol.PhaseFailed,
					Reason: state.ReasonJournalCorrupt, UpdatedAt: time.Now().UTC().Truncate(time.Second),
					Message: fmt.Sprintf("the agent's journal is corrupt (%v); the agent changes nothing until it is repaired or removed and the agent restarted", cause)})
				reported = desired
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		}
	}
}

// waitForNewerAgent reports a plan written for a newer agent (its fields are
// unknown here: protocol.ErrPlanNewerThanAgent) Pending, neither applied nor
// refused: a rejection would be journaled against the plan's hash for good, and
// the agent that knows those fields, which the coordinator rolls out with the
// DaemonSet's image, applies the same plan. The coordinator's deadlines bound the
// wait.
func (a *Agent) waitForNewerAgent(desired string, err error) {
	a.Log.Info("Waiting for a newer agent: the plan has fields this agent does not know", "plan", desired, "error", err.Error())
	st := pending(desired, fmt.Sprintf("not applying plan %s: %v; waiting for the agent DaemonSet to run an agent that knows them", desired, err))
	st.Reason = protocol.ReasonAgentOutdated
	a.Reporter.Report(st)
}
