package drain

import (
	"fmt"
	"regexp"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// Waiting lists, sorted, pods left on purpose for now: waited for until they
	// complete, or evicted after a lower drain order (AttemptMachine).
	Waiting []Blocker
	// Skipped lists, sorted, pods that stay on the node (DaemonSet and mirror
	// pods, drain behavior Skip); AttemptMachine only.
	Skipped []string
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
	case len(r.Waiting) > 0:
		s := r.Waiting[0].String()
		if n := len(r.Waiting) - 1; n > 0 {
			s += fmt.Sprintf(" (and %d more)", n)
		}
		return s
	default:
		return "waiting for pods to leave"
	}
}

// budgetNameRE finds the PDB's name in the API server's refusal of an eviction.
var budgetNameRE = regexp.MustCompile(`The disruption budget (\S+) `)

func key(pod *corev1.Pod) string { return pod.Namespace + "/" + pod.Name }
