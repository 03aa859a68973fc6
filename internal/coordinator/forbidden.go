package coordinator

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
)

// authorizerWarmingUp reports whether err is an authorization refusal of the kind
// a kube-apiserver gives while its RBAC authorizer has not loaded the cluster's
// bindings yet: a plain Forbidden, with no cause attached. The coordinator talks to
// a workload cluster with Cluster API's admin kubeconfig (kubernetes-admin, whose
// group kubeadm:cluster-admins is bound to cluster-admin by RBAC, not
// system:masters), so after a control-plane node's API server restarts its first
// answers are "forbidden: User kubernetes-admin cannot ..." for a few seconds (seen
// on the real-node lane); that is the API server not ready, not a refusal. A
// Forbidden that carries a cause (a namespace being terminated) is a definite
// answer. A binding really removed keeps the update waiting with the API server's
// message in the hook's answer instead of failing it.
func authorizerWarmingUp(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || !apierrors.IsForbidden(err) {
		return false
	}
	d := st.Status().Details
	if d == nil {
		return true
	}
	// client-go marks a response whose body it did not decode (discovery reads
	// /api and /apis raw, so the API server's JSON Status is never parsed) with a
	// single cause of type UnexpectedServerResponse, message "unknown": the
	// real-node lane's "failed to get server groups: unknown" during a
	// control-plane restart was such a 403. It says nothing about why the server
	// refused, so it counts as no cause.
	for _, c := range d.Causes {
		if c.Type != metav1.CauseTypeUnexpectedServerResponse {
			return false
		}
	}
	return true
}

// logRefusal records what a workload API server's refusal carried (code, reason,
// causes), so that an answer judged a refusal can be told apart afterwards; the
// message alone ("unknown") did not say.
func logRefusal(err error) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return
	}
	s := st.Status()
	var causes []string
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			causes = append(causes, string(c.Type))
		}
	}
	ctrl.Log.WithName("coordinator").Info("Workload cluster API server refused a call", "code", s.Code, "reason", string(s.Reason), "causes", causes, "error", err.Error())
}
