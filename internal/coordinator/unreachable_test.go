package coordinator

import (
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
)

// TestUnreachable: which workload-cluster errors mean "the API server may come back"
// (in progress) and which are a definite answer (Failure). The Unknown case is what a
// real control-plane node's kube-apiserver answered discovery with while it started
// after its upgrade (the real-node lane); it was answered as a Failure before.
func TestUnreachable(t *testing.T) {
	node := schema.GroupResource{Resource: "nodes"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("read node n1: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), true},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"internal error", apierrors.NewInternalError(errors.New("etcd")), true},
		{"server error without a reason", fmt.Errorf("failed to get server groups: %w", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Message: "unknown", Code: 500}}), true},
		{"status without a code or reason", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Message: "unknown"}}, true},
		{"client error without a reason (a webhook's denial)", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Message: "denied", Code: 400}}, false},
		// A restarted API server's RBAC authorizer refuses until it has loaded the
		// bindings (the real-node lane: "forbidden: User kubernetes-admin cannot get
		// resource nodes"); it was answered as a Failure before.
		{"forbidden by RBAC (authorizer warming up)", fmt.Errorf("read node n1: %w", apierrors.NewForbidden(node, "n1", errors.New(`User "kubernetes-admin" cannot get resource "nodes"`))), true},
		{"forbidden with a cause (namespace terminating)", &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: "NamespaceTerminating", Message: "namespace capi-inplace-system is being terminated"}}}}}, false},
		{"not found", apierrors.NewNotFound(node, "n1"), false},
		{"input error", fmt.Errorf("plan: %w", nodeplan.ErrInput), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unreachable(tt.err); got != tt.want {
				t.Errorf("unreachable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
