package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// The coordinator withdraws a plan its agent has not picked up within the pick-up
// deadline, and puts the node back in service. The agent must then never start it:
// it would change a node that takes workloads again. The informer's copy of the Node
// may be older than the withdrawal, so before the first action the agent claims the
// plan on the Node as stored: it reads the Node afresh and, if the plan is still
// desired and not withdrawn, writes its first status for it with that read's
// resourceVersion as a precondition. The coordinator withdraws with the same
// precondition (update.go abandon), so exactly one of the two writes lands: a claim
// after the withdrawal conflicts and, read again, finds the plan withdrawn; a
// withdrawal after the claim conflicts and, read again, finds the agent at work.

// claimTimeout bounds the claim's two requests.
const claimTimeout = 10 * time.Second

// claimPlan reports whether the agent may start plan hash (claimed now, or
// already by an earlier claim); false, nil: the coordinator withdrew it.
//
// A conflict (another writer changed the Node between the read and the claim: the
// coordinator publishing, the kubelet, a withdrawal) is retried at once with a fresh
// read, which decides again; waiting for the next reconcile instead would stall the
// update for the agent's error backoff.
func (a *Agent) claimPlan(ctx context.Context, hash string) (claimed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claimed, err = a.claimOnce(ctx, hash)
		return err
	})
	return claimed, err
}

// claimOnce is one read and conditional write of the claim.
func (a *Agent) claimOnce(ctx context.Context, hash string) (bool, error) {
	nodes := a.Client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, a.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read node %s before starting plan %s: %w", a.NodeName, hash, err)
	}
	ann := n.Annotations
	if ann[inplacev1.DesiredPlanAnnotation] != hash || ann[inplacev1.PlanNotPickedUpAnnotation] == hash {
		return false, nil
	}
	if cur, err := protocol.DecodeStatus(ann[inplacev1.StatusAnnotation]); err == nil && cur.PlanHash == hash {
		return true, nil
	}
	value, err := protocol.EncodeStatus(pending(hash, fmt.Sprintf("picked up plan %s", hash)))
	if err != nil {
		return false, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": n.ResourceVersion,
		"annotations": map[string]any{
			inplacev1.StateAnnotation:  string(protocol.PhasePending),
			inplacev1.StatusAnnotation: value,
		},
	}})
	if err != nil {
		return false, fmt.Errorf("encode claim patch: %w", err)
	}
	if _, err := nodes.Patch(ctx, a.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "capi-inplace-agent"}); err != nil {
		return false, fmt.Errorf("claim plan %s on node %s: %w", hash, a.NodeName, err)
	}
	return true, nil
}
