package status

import (
	corev1 "k8s.io/api/core/v1"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Staging is the agent's staging of a plan before the node is cordoned (the
// Node's stage-plan and staging annotations, protocol.StagingStatus).
type Staging struct {
	Plan  string              `json:"plan"`
	Phase protocol.StagePhase `json:"phase,omitempty"`
	// Item is the artifact in progress (or the one that failed).
	Item protocol.StageItemName `json:"item,omitempty"`
	// Bytes of Size are fetched for Item (Size 0: the source did not say).
	Bytes int64 `json:"bytes,omitempty"`
	Size  int64 `json:"size,omitempty"`
	// Done of Items artifacts are staged.
	Done   int    `json:"done"`
	Items  int    `json:"items"`
	Reason string `json:"reason,omitempty"`
	// Progress is the one-line summary ("kubelet 12.0 of 58.3 MiB, 1 of 2 artifacts staged").
	Progress string `json:"progress"`
}

// staging returns the staging of the plan the Node is asked to stage, nil when it
// is asked for none or the plan is already desired or committed (the agent's
// status then tells its progress).
func staging(node *corev1.Node) (*Staging, error) {
	ann := node.Annotations
	plan := ann[inplacev1.StagePlanAnnotation]
	if plan == "" || plan == ann[inplacev1.DesiredPlanAnnotation] || plan == ann[inplacev1.CurrentPlanAnnotation] {
		return nil, nil
	}
	sv := &Staging{Plan: plan, Progress: "waiting for the agent to stage plan " + short(plan)}
	raw, ok := ann[inplacev1.StagingStatusAnnotation]
	if !ok {
		return sv, nil
	}
	st, err := protocol.DecodeStagingStatus(raw)
	if err != nil {
		return sv, err
	}
	if st.PlanHash != plan {
		return sv, nil // a report of an earlier plan
	}
	sv.Phase, sv.Item, sv.Bytes, sv.Size, sv.Done, sv.Items, sv.Reason = st.Phase, st.Item, st.Bytes, st.Size, st.Done, st.Items, st.Reason
	sv.Progress = st.Progress()
	if st.Phase == protocol.StagePhaseFailed {
		sv.Progress = "staging failed: " + joinNonEmpty(st.Reason, st.Message)
	}
	return sv, nil
}
