package coordinator

import (
	"crypto/ecdh"
	"fmt"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
)

// retryAgentKey is how soon CAPI should call again while a node's agent has not
// published its key: the agent does that first thing after it starts.
const retryAgentKey = 2

// nodeAgentKey returns the key the node's agent published on its Node. Every plan
// is sealed to it, so that no other node can read it (see nodeplan.Seal). It is
// nodeplan.ErrNoAgentKey while there is none yet: the call answers in progress with
// agentKeyWaitMessage, before the node is cordoned. A changed key (the host was
// reinstalled) is simply the key the plan is sealed to from now on: publish seals
// the plan again.
func nodeAgentKey(s *scope) (*ecdh.PublicKey, error) {
	key, err := nodeplan.AgentKey(s.node.GetAnnotations())
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", s.node.Name, err)
	}
	return key, nil
}

func agentKeyWaitMessage(s *scope) string {
	return stepMsg(stepAgent, "waiting for the agent's key on node %s (annotation %s): its plan is sealed to it",
		s.node.Name, inplacev1.AgentKeyAnnotation)
}

// sealedPlanData returns the plan Secret's data to write for the plan sealed to key:
// nil when the Secret already holds this plan sealed to this key (a sealing is
// randomised, so comparing bytes would rewrite the Secret on every call).
func sealedPlanData(s *scope, key *ecdh.PublicKey) (map[string][]byte, error) {
	if key == nil {
		return nil, fmt.Errorf("publish plan for node %s: %w", s.node.Name, nodeplan.ErrNoAgentKey)
	}
	if s.planSecret != nil && nodeplan.Holds(s.planSecret.Data[inplacev1.PlanSecretDataKey], s.planHash, key) {
		return nil, nil
	}
	sealed, err := nodeplan.Seal(s.plan, key)
	if err != nil {
		return nil, fmt.Errorf("seal the plan for node %s: %w", s.node.Name, err)
	}
	return map[string][]byte{inplacev1.PlanSecretDataKey: sealed}, nil
}
