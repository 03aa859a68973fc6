package drain

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capidrain "sigs.k8s.io/cluster-api/core/reconcilers/machine/drain"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Machine is what Cluster API's drain of a Machine's node depends on besides the
// node: the MachineDrainRules of the Machine's namespace select by Machine and
// Cluster labels.
type Machine struct {
	// Management lists the MachineDrainRules in the management cluster.
	Management client.Client
	// Workload reads the node's pods and the namespaces.
	Workload client.Client
	// Evictions sends the evictions, each once (oneShotEvictions).
	Evictions kubernetes.Interface
	Cluster   *clusterv1.Cluster
	Machine   *clusterv1.Machine
}

// AttemptMachine makes one bounded drain pass the way Cluster API's machine
// controller drains a Machine's node before deleting it, through Cluster API's own
// drain helper (core/reconcilers/machine/drain): DaemonSet and mirror pods stay;
// a pod labelled cluster.x-k8s.io/drain=skip or wait-completed, or selected by a
// MachineDrainRule that applies to the Machine (first rule by name wins), is
// skipped or waited for until it completes; the others are evicted through the
// Eviction API (PDBs honoured) in the rules' drain order, lowest first, each order
// only once every pod of a lower one is gone.
//
// One rule stays ours: without opts.Force a pod that no controller recreates
// blocks the drain and nothing is evicted (Cluster API evicts it with a warning;
// here the node comes back after the update and the operator decides).
func AttemptMachine(ctx context.Context, m Machine, nodeName string, opts Options) (Result, error) {
	budget := opts.Budget
	if budget <= 0 {
		budget = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	grace := opts.GracePeriodSeconds
	if grace == 0 {
		grace = -1
	}
	h := &capidrain.Helper{Client: m.Management, RemoteClient: oneShotEvictions{Client: m.Workload, cs: m.Evictions}, GracePeriodSeconds: grace}
	list, err := h.GetPodsForEviction(ctx, m.Cluster, m.Machine, nodeName)
	if err != nil {
		return Result{}, fmt.Errorf("list the pods to drain from node %s: %w", nodeName, err)
	}
	var res Result
	for _, p := range list.SkippedPods() {
		res.Skipped = append(res.Skipped, key(p))
	}
	sort.Strings(res.Skipped)
	pods := list.Pods()
	if !opts.Force {
		for _, p := range pods {
			if p.DeletionTimestamp == nil && metav1.GetControllerOf(p) == nil && !finished(p) {
				res.Blockers = append(res.Blockers, Blocker{Pod: key(p), Reason: ReasonNoController})
			}
		}
		if len(res.Blockers) > 0 {
			sortBlockers(res.Blockers)
			return res, nil
		}
	}
	if len(pods) == 0 {
		res.Done = true
		return res, nil
	}
	er := h.EvictPods(ctx, list)
	for _, p := range er.PodsDeletionTimestampSet {
		res.Terminating = append(res.Terminating, key(p))
	}
	sort.Strings(res.Terminating)
	for msg, ps := range er.PodsFailedEviction {
		for _, p := range ps {
			b := Blocker{Pod: key(p), Reason: msg}
			if mm := budgetNameRE.FindStringSubmatchIndex(msg); mm != nil {
				// Cluster API prefixes the API server's cause ("The disruption
				// budget web needs ...") with the refusal's generic message.
				b.PDB, b.Reason = p.Namespace+"/"+msg[mm[2]:mm[3]], msg[mm[0]:]
			}
			res.Blockers = append(res.Blockers, b)
		}
	}
	for _, p := range append(er.PodsToWaitCompletedNow, er.PodsToWaitCompletedLater...) {
		res.Waiting = append(res.Waiting, Blocker{Pod: key(p), Reason: ReasonWaitCompleted})
	}
	for _, p := range er.PodsToTriggerEvictionLater {
		res.Waiting = append(res.Waiting, Blocker{Pod: key(p), Reason: ReasonDrainOrder})
	}
	sortBlockers(res.Blockers)
	sortBlockers(res.Waiting)
	res.Done = er.DrainCompleted()
	return res, nil
}

// Reasons AttemptMachine gives for a pod that is not evicted yet.
const (
	ReasonNoController  = "no controller recreates it: evicting it loses it for good (the policy's drain.force evicts it)"
	ReasonWaitCompleted = "waiting for it to complete (drain behavior WaitCompleted)"
	ReasonDrainOrder    = "evicted once the pods of a lower drain order are gone"
)

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func sortBlockers(bs []Blocker) {
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].String() < bs[j].String() })
}
