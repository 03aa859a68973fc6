package nodeplan

import (
	"crypto/ecdh"
	"errors"
	"fmt"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ErrNoAgentKey: the node's agent has not published its key yet, so no plan can be
// sealed to it. The coordinator waits (in progress) and publishes nothing.
var ErrNoAgentKey = errors.New("the node's agent has not published its key")

// AgentKey returns the public key the node's agent published in its Node's
// agent-key annotation: ErrNoAgentKey when there is none, an error wrapping
// protocol.ErrInvalidAgentKey when it does not parse.
func AgentKey(nodeAnnotations map[string]string) (*ecdh.PublicKey, error) {
	v, ok := nodeAnnotations[inplacev1.AgentKeyAnnotation]
	if !ok || v == "" {
		return nil, ErrNoAgentKey
	}
	return protocol.ParseAgentKey(v)
}

// Seal returns the plan Secret's data for p: p sealed to the node's key, with the
// pin the coordinator reads back on its next call (PinPublished). Every call seals
// afresh (a new one-time key), so callers write only when Holds says the stored plan
// is not this plan for this key.
func Seal(p *protocol.NodePlan, key *ecdh.PublicKey) ([]byte, error) {
	pin, err := PinOf(p)
	if err != nil {
		return nil, err
	}
	return protocol.SealPlan(p, key, pin)
}

// Holds reports whether stored (a plan Secret's data) is the plan with hash sealed
// to key: then nothing needs writing. A plan sealed to another key (the node's key
// changed: host reinstalled) or undecodable does not hold, and is sealed again.
func Holds(stored []byte, hash string, key *ecdh.PublicKey) bool {
	s, err := protocol.DecodeSealedPlan(stored)
	return err == nil && s.PlanHash == hash && s.Recipient == protocol.KeyID(key)
}

// Published reads the header of a published plan: nil when stored is not a sealed
// plan (absent or corrupt: it is replaced by the next publication).
func Published(stored []byte) *protocol.SealedPlan {
	s, err := protocol.DecodeSealedPlan(stored)
	if err != nil {
		return nil
	}
	return s
}

// PinOf is what a published plan carries in the clear for PinPublished: its kubeadm
// choices and the hash of the rest.
func PinOf(p *protocol.NodePlan) (protocol.PlanPin, error) {
	base := *p
	base.Kubernetes.Action, base.Kubernetes.EtcdSnapshot = "", false
	h, err := base.Hash()
	if err != nil {
		return protocol.PlanPin{}, fmt.Errorf("pin node plan: %w", err)
	}
	return protocol.PlanPin{BaseHash: h, Action: p.Kubernetes.Action, EtcdSnapshot: p.Kubernetes.EtcdSnapshot}, nil
}

// PinPublished keeps the kubeadm action and etcd snapshot choice of the published
// plan when the newly built plan asks for the same desired content (the reason is
// Pin's). The coordinator cannot open what it published, so it compares against the
// pin in the sealed plan's header. published may be nil.
func PinPublished(built *protocol.NodePlan, published *protocol.SealedPlan) *protocol.NodePlan {
	if built == nil || published == nil {
		return built
	}
	pin, err := PinOf(built)
	if err != nil || pin.BaseHash != published.Pin.BaseHash {
		return built
	}
	return withPin(built, published.Pin)
}

// withPin is built with the kubeadm choices of pin.
func withPin(built *protocol.NodePlan, pin protocol.PlanPin) *protocol.NodePlan {
	pinned := *built
	pinned.Kubernetes.Action = pin.Action
	pinned.Kubernetes.EtcdSnapshot = pin.EtcdSnapshot
	return &pinned
}

// PinRetried gives a plan built again on an operator's retry the kubeadm choices of
// the plan the retry withdrew, when both carry out the same desired state on the
// same node. Those choices were made from the node before the update, which the
// rollback restored; the Node as read right after a rollback can still report the
// new kubelet (seen on real nodes), and choosing again from it would drop the
// upgrade. Everything else is the new build's: that is what the retry is for.
// withdrawn may be nil.
func PinRetried(built *protocol.NodePlan, withdrawn *protocol.SealedPlan) *protocol.NodePlan {
	if built == nil || withdrawn == nil || withdrawn.DesiredState == "" || withdrawn.NodeName != built.NodeName {
		return built
	}
	if desired, err := built.DesiredState(); err != nil || desired != withdrawn.DesiredState {
		return built
	}
	pinned := withPin(built, withdrawn.Pin)
	// The pin is read from the Secret's clear header: a choice this node's plan
	// cannot carry is the new build's to make.
	if pinned.Validate() != nil {
		return built
	}
	return pinned
}

// KeepPublished reports whether the coordinator keeps the published plan instead
// of its own build: the published plan is for this node, sealed to the node's
// current key, and carries out the same desired state (protocol.NodePlan.DesiredState).
// Then a replica with other policy or code, a rotated registry credential or a
// map read in another order does not publish a second plan for the same spec:
// the node keeps the plan it has, and the update keeps one identity from start
// to end. published and key may be nil.
func KeepPublished(published *protocol.SealedPlan, node, desiredState string, key *ecdh.PublicKey) bool {
	return published != nil && key != nil && desiredState != "" &&
		published.NodeName == node && published.DesiredState == desiredState && published.Recipient == protocol.KeyID(key)
}
