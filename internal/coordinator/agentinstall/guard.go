package agentinstall

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// UnguardedError says why a node's AgentAnnotations were not kept to its agent:
// the policy or its binding is missing, switched to warn or audit only, narrowed,
// older than GuardVersion, or installed after since (Guarded).
type UnguardedError struct{ Reason string }

func (e *UnguardedError) Error() string {
	return "the node annotation guard " + PolicyName + " " + e.Reason
}

// Guarded reads the policy and binding that keep every node's AgentAnnotations
// to its own agent, and answers nil only if both are installed as Objects
// renders them in substance (the binding denies, for every Node, through a
// policy of GuardVersion or later) and both existed at since: a value written
// before a policy that was deleted and installed again may have been written by
// anyone. A zero since skips that test. Another error is a failed read.
// installed is when the later of the two was created, by the API server's clock.
func Guarded(ctx context.Context, r client.Reader, since time.Time) (installed time.Time, err error) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, o := range []client.Object{policy, binding} {
		err := r.Get(ctx, client.ObjectKey{Name: PolicyName}, o)
		switch {
		case apierrors.IsNotFound(err):
			return time.Time{}, &UnguardedError{Reason: fmt.Sprintf("is missing (%T)", o)}
		case err != nil:
			return time.Time{}, fmt.Errorf("read the node annotation guard: %w", err)
		}
		if created := o.GetCreationTimestamp().Time; created.After(installed) {
			installed = created
		}
	}
	if v, err := strconv.Atoi(policy.Annotations[GuardVersionAnnotation]); err != nil || v < GuardVersion {
		return installed, &UnguardedError{Reason: fmt.Sprintf("is of version %q, older than %d", policy.Annotations[GuardVersionAnnotation], GuardVersion)}
	}
	b := binding.Spec
	if b.PolicyName != PolicyName || !slices.Contains(b.ValidationActions, admissionregistrationv1.Deny) || b.MatchResources != nil || b.ParamRef != nil {
		return installed, &UnguardedError{Reason: "binding does not deny every Node write the policy refuses"}
	}
	if !since.IsZero() && installed.After(since) {
		return installed, &UnguardedError{Reason: fmt.Sprintf("was installed at %s, after %s", installed.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))}
	}
	return installed, nil
}

// EnsureGuard applies the policy and its binding alone (Ensure applies them only
// with the rest of the agent's objects, when its DaemonSet is outdated).
func EnsureGuard(ctx context.Context, c client.Client) error {
	return apply(ctx, c, guardObjects())
}
