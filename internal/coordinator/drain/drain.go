package drain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	kubectldrain "k8s.io/kubectl/pkg/drain"
)

// Options tune one drain attempt.
type Options struct {
	// Budget bounds the wall time of one Attempt; evictions not sent within it are
	// sent by the next Attempt. Zero means 3 s.
	Budget time.Duration
	// Force also evicts pods that no controller will recreate. Without it such a pod
	// blocks the drain and is reported, because evicting it loses it for good.
	Force bool
	// GracePeriodSeconds overrides the pods' termination grace period; -1 (or 0 in
	// the zero value) keeps each pod's own.
	GracePeriodSeconds int
}

// Blocker is one reason the node is not drained yet.
type Blocker struct {
	// Pod is "namespace/name"; empty when the blocker is not one pod.
	Pod string
	// PDB is "namespace/name" of the PodDisruptionBudget refusing the eviction.
	PDB string
	// Reason is a short, deterministic explanation.
	Reason string
}

// String renders the blocker as part of a progress message.
func (b Blocker) String() string {
	switch {
	case b.PDB != "":
		return fmt.Sprintf("pod %s: eviction blocked by PodDisruptionBudget %s (%s)", b.Pod, b.PDB, b.Reason)
	case b.Pod != "":
		return fmt.Sprintf("pod %s: %s", b.Pod, b.Reason)
	default:
		return b.Reason
	}
}

// Result is the outcome of one Attempt.
type Result struct {
	// Done is true when no pod that must leave is left on the node.
	Done bool
	// Evicted lists pods whose eviction was accepted in this attempt.
	Evicted []string
	// Terminating lists pods already on their way out.
	Terminating []string
	// Blockers lists, sorted, what refused or failed.
	Blockers []Blocker
}

// Summary is a deterministic one-line description of what the drain waits for.
func (r Result) Summary() string {
	switch {
	case r.Done:
		return "node drained"
	case len(r.Blockers) > 0:
		s := r.Blockers[0].String()
		if n := len(r.Blockers) - 1; n > 0 {
			s += fmt.Sprintf(" (and %d more)", n)
		}
		return s
	case len(r.Terminating)+len(r.Evicted) > 0:
		pods := append(append([]string{}, r.Terminating...), r.Evicted...)
		sort.Strings(pods)
		s := "waiting for pod " + pods[0] + " to terminate"
		if n := len(pods) - 1; n > 0 {
			s += fmt.Sprintf(" (and %d more)", n)
		}
		return s
	default:
		return "waiting for pods to leave"
	}
}

var budgetNameRE = regexp.MustCompile(`The disruption budget (\S+) `)

// Attempt makes one bounded pass over the node's pods; see the package doc.
func Attempt(ctx context.Context, cs kubernetes.Interface, nodeName string, opts Options) (Result, error) {
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
	helper := &kubectldrain.Helper{
		Ctx:                 ctx,
		Client:              cs,
		Force:               opts.Force,
		GracePeriodSeconds:  grace,
		IgnoreAllDaemonSets: true,
		// The node keeps its disks, but a pod evicted from it starts elsewhere with a
		// fresh emptyDir anyway; refusing would make every such pod block forever.
		DeleteEmptyDirData: true,
		Out:                io.Discard,
		ErrOut:             io.Discard,
	}
	list, errs := helper.GetPodsForDeletion(nodeName)
	if list == nil {
		return Result{}, fmt.Errorf("list pods of node %s: %w", nodeName, errors.Join(errs...))
	}
	var res Result
	for _, err := range errs {
		// Filter errors name the pods they refuse ("cannot delete <why>: ns/a, ns/b").
		res.Blockers = append(res.Blockers, Blocker{Reason: err.Error()})
	}

	pods := list.Pods()
	sort.Slice(pods, func(i, j int) bool { return key(&pods[i]) < key(&pods[j]) })
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil {
			res.Terminating = append(res.Terminating, key(pod))
			continue
		}
		if ctx.Err() != nil {
			// Out of budget: this pod is evicted by the next attempt.
			res.Terminating = append(res.Terminating, key(pod))
			continue
		}
		err := evict(ctx, cs, pod, grace)
		switch {
		case err == nil:
			res.Evicted = append(res.Evicted, key(pod))
		case apierrors.IsNotFound(err):
			// Gone already.
		case apierrors.IsTooManyRequests(err):
			res.Blockers = append(res.Blockers, Blocker{Pod: key(pod), PDB: blockingPDB(ctx, cs, pod, err), Reason: pdbReason(err)})
		default:
			res.Blockers = append(res.Blockers, Blocker{Pod: key(pod), Reason: "eviction failed: " + err.Error()})
		}
	}
	sort.SliceStable(res.Blockers, func(i, j int) bool { return res.Blockers[i].String() < res.Blockers[j].String() })
	res.Done = len(pods) == 0 && len(res.Blockers) == 0
	return res, nil
}

// evict sends one eviction and returns at once. kubectl's Helper.EvictPod would do the
// same through a client that honours the API server's Retry-After on 429 by sleeping
// and retrying up to ten times: a PDB refusal would then eat the whole hook budget.
func evict(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, grace int) error {
	ev := &policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
	}
	if grace >= 0 {
		g := int64(grace)
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: &g}
	}
	return cs.PolicyV1().RESTClient().Post().
		AbsPath("/api/v1").
		Namespace(pod.Namespace).
		Resource("pods").
		Name(pod.Name).
		SubResource("eviction").
		Body(ev).
		MaxRetries(0).
		Do(ctx).
		Error()
}

func key(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }

func pdbReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				return c.Message
			}
		}
	}
	return "the pod's disruption budget allows no disruption now"
}

// blockingPDB names the PDB refusing an eviction: from the API server's cause when it
// names one, otherwise the PDB whose selector matches the pod.
func blockingPDB(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, err error) string {
	if m := budgetNameRE.FindStringSubmatch(pdbReason(err)); m != nil {
		return pod.Namespace + "/" + m[1]
	}
	pdbs, lerr := cs.PolicyV1().PodDisruptionBudgets(pod.Namespace).List(ctx, metav1.ListOptions{})
	if lerr != nil {
		return "(unknown)"
	}
	var names []string
	for _, pdb := range pdbs.Items {
		sel, serr := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if serr == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) {
			names = append(names, pod.Namespace+"/"+pdb.Name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "(unknown)"
	}
	return strings.Join(names, ",")
}
