package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/capi-inplace/capi-inplace/internal/agent/state"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// maxNodePods bounds the pods a CEL gate sees: a node runs at most a few
// hundred (the kubelet's max-pods); more means the field selector did not apply.
const maxNodePods = 1000

// PodsOnNode implements gate.PodLister: the pods bound to the agent's own Node
// (field selector spec.nodeName), in one bounded list. RBAC grants the agent
// list of pods (it cannot be confined to one node's: docs/gates.md).
func (r NodeReader) PodsOnNode(ctx context.Context) ([]corev1.Pod, error) {
	list, err := r.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", r.NodeName).String(), Limit: maxNodePods})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", r.NodeName, err)
	}
	if list.Continue != "" {
		return nil, fmt.Errorf("list pods of node %s: more than %d", r.NodeName, maxNodePods)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != r.NodeName {
			return nil, errors.New("the API server ignored the spec.nodeName field selector")
		}
	}
	return list.Items, nil
}

// gateStamp names the health gate in the statuses the Reporter sends
// (protocol.NodeStatus.Gate): while the gates action runs, the gate that runs
// now, reported again as each gate starts (Reporter.GateStarted, wired to
// gate.Checker.Progress); with Reason GateFailed, the gate that did not pass. It
// stamps every status of the plan, the executor's and the agent's own re-reports
// alike. It only knows gates run by this process; the failed gate also comes
// from the journaled state (state.State.FailedGate), which survives a restart.
type gateStamp struct {
	mu   sync.Mutex
	last *protocol.NodeStatus // as given to Report, unstamped
	plan string
	gate string
}

// GateStarted is told the name of each gate as it starts; while the gates
// action runs it reports the last status again, naming the gate.
func (r *Reporter) GateStarted(name string) {
	g := &r.gates
	g.mu.Lock()
	g.gate = name
	var again *protocol.NodeStatus
	if g.last != nil && g.last.Action == string(state.ActGates) && !g.last.Phase.Terminal() {
		s := *g.last
		again = &s
	}
	g.mu.Unlock()
	if again != nil {
		r.Report(*again)
	}
}

// stamp records s as the last status and sets its gate from the gate that runs
// or ran last for its plan.
func (g *gateStamp) stamp(s *protocol.NodeStatus) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.PlanHash != g.plan {
		g.plan, g.gate = s.PlanHash, ""
	}
	last := *s
	g.last = &last
	switch {
	case g.gate == "" || s.Gate != "":
	case s.Reason == state.ReasonGateFailed:
		s.Gate = g.gate
	case s.Action == string(state.ActGates) && !s.Phase.Terminal():
		s.Gate = g.gate
		s.Message = fmt.Sprintf("%s: gate %s", s.Message, g.gate)
	}
}
