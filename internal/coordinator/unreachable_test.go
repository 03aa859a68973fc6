package coordinator

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

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

// TestDiscoveryForbiddenWhileStarting reproduces the real-node lane's
// "failed to get server groups: unknown" with client-go's own discovery client: a
// kube-apiserver whose RBAC authorizer has not loaded the bindings answers /api
// with 403 and a JSON Status, which discovery reads raw, so the error carries only
// the client's UnexpectedServerResponse cause and the message "unknown". It was
// answered as a Failure (cause WorkloadAPI) before; it is the API server starting.
func TestDiscoveryForbiddenWhileStarting(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: User \"kubernetes-admin\" cannot get path \"/api\"","reason":"Forbidden","code":403}`))
	}))
	defer ts.Close()
	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = dc.GroupsAndMaybeResources()
	if err == nil {
		t.Fatal("discovery against a 403 answered no error")
	}
	err = fmt.Errorf("read node rn-cp: %w", fmt.Errorf("failed to get server groups: %w", err))
	if got, want := err.Error(), "read node rn-cp: failed to get server groups: unknown"; got != want {
		t.Fatalf("error = %q, want the lane's %q", got, want)
	}
	if !unreachable(err) {
		t.Errorf("unreachable(%v) = false: a starting API server's discovery refusal fails the update", err)
	}
}
