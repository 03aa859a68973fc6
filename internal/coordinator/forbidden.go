package coordinator

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	return d == nil || len(d.Causes) == 0
}
