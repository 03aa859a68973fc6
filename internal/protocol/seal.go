package protocol

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
)

// SealedPlanKind is the kind of a SealedNodePlan envelope: the form in which a plan
// is published, readable only with the private key of the node it is sealed to.
const SealedPlanKind = "SealedNodePlan"

// SealX25519AESGCM names version 1 of the sealing scheme: an ephemeral X25519 key
// agreement with the node's key, HKDF-SHA256 over the shared secret (salt: the
// ephemeral and the node's public keys), AES-256-GCM over the plan's JSON with the
// envelope's header as additional data. Standard library only.
const SealX25519AESGCM = "x25519-hkdf-sha256-aes256gcm-v1"

// AgentKeyPrefix starts the value of the node's agent-key annotation; the rest is
// the standard base64 of the 32-byte X25519 public key.
const AgentKeyPrefix = "x25519:"

const sealInfo = "capi-inplace sealed node plan v1"

// hexRE matches a plan hash or a KeyID.
var hexRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// SealedPlan is the published form of a NodePlan. The header (every field but
// Ciphertext) is readable by anyone who can read the plan Secret; it holds nothing
// secret: the plan hash is on the Node's desired-plan annotation anyway, and Pin
// holds only kubeadm choices. The header is authenticated as GCM additional data,
// so the node that opens the plan knows it was not swapped.
type SealedPlan struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Seal       string `json:"seal"`
	// NodeName is the node the plan is for.
	NodeName string `json:"nodeName"`
	// PlanHash is the hash of the plaintext plan (NodePlan.Hash): the plan's identity,
	// the same sealed or not and whatever key it is sealed to.
	PlanHash string `json:"planHash"`
	// DesiredState is the identity of the desired state the plan carries out
	// (NodePlan.DesiredState): a coordinator keeps a published plan of the same
	// identity instead of publishing its own build of it. Empty in plans sealed
	// before the field.
	DesiredState string `json:"desiredState,omitempty"`
	// Recipient is the KeyID of the node key the plan is sealed to.
	Recipient string `json:"recipient"`
	// Ephemeral is the sender's one-time X25519 public key; Nonce the GCM nonce.
	Ephemeral []byte `json:"ephemeral"`
	Nonce     []byte `json:"nonce"`
	// Pin is what the coordinator needs to know of a plan it published but cannot
	// open (see nodeplan.PinPublished).
	Pin PlanPin `json:"pin"`

	// Ciphertext is the sealed plan JSON; it follows the header in the encoding.
	Ciphertext []byte `json:"-"`
	// header is the header exactly as decoded: the additional data to open with.
	header []byte
}

// PlanPin is the part of a published plan the coordinator keeps from call to call
// without opening it: the kubeadm choices it pins while the rest of the plan (whose
// hash is BaseHash) stays the same.
type PlanPin struct {
	BaseHash     string        `json:"baseHash"`
	Action       KubeadmAction `json:"action"`
	EtcdSnapshot bool          `json:"etcdSnapshot,omitempty"`
}

// ReasonSealedToAnotherKey is the NodeStatus reason of a Pending plan that is sealed
// to a key the node does not hold (its previous key, typically): the agent refuses
// it and waits for the coordinator to seal the plan to the node's current key.
const ReasonSealedToAnotherKey = "SealedToAnotherKey"

// SealedToAnotherKeyError is returned by Open when the plan is sealed to a key this
// node does not hold (typically its previous key: the host was reinstalled and the
// coordinator has not sealed the plan to the new key yet).
type SealedToAnotherKeyError struct {
	// Recipient is the key the plan is sealed to; Have the node's own key.
	Recipient, Have string
}

func (e *SealedToAnotherKeyError) Error() string {
	return fmt.Sprintf("the plan is sealed to key %s, this node's key is %s", e.Recipient, e.Have)
}

// KeyID names a node key in envelopes and messages: the first 16 bytes of the
// SHA-256 of the raw public key, in hex.
func KeyID(pub *ecdh.PublicKey) string {
	sum := sha256.Sum256(pub.Bytes())
	return hex.EncodeToString(sum[:16])
}

// FormatAgentKey is the agent-key annotation value for a public key.
func FormatAgentKey(pub *ecdh.PublicKey) string {
	return AgentKeyPrefix + base64.StdEncoding.EncodeToString(pub.Bytes())
}

// ErrInvalidAgentKey is wrapped by every error of ParseAgentKey.
var ErrInvalidAgentKey = errors.New("invalid agent key")

// ParseAgentKey parses an agent-key annotation value.
func ParseAgentKey(value string) (*ecdh.PublicKey, error) {
	rest, ok := strings.CutPrefix(value, AgentKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: does not start with %q", ErrInvalidAgentKey, AgentKeyPrefix)
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAgentKey, err)
	}
	pub, err := ecdh.X25519().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAgentKey, err)
	}
	// A low-order point (all zeros, for one) parses but no plan can be sealed to
	// it; refusing it here makes it "no usable key yet", not a sealing failure.
	probe, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("check agent key: %w", err)
	}
	if _, err := probe.ECDH(pub); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAgentKey, err)
	}
	return pub, nil
}

// SealPlan validates p and seals it to the node key to. The result is the header's
// JSON, a newline, then the raw ciphertext (no base64: a plan near its size limit
// still fits one Secret).
func SealPlan(p *NodePlan, to *ecdh.PublicKey, pin PlanPin) ([]byte, error) {
	plain, err := EncodePlan(p)
	if err != nil {
		return nil, err
	}
	hash, err := p.Hash()
	if err != nil {
		return nil, err
	}
	desired, err := p.DesiredState()
	if err != nil {
		return nil, err
	}
	eph, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("seal node plan: %w", err)
	}
	shared, err := eph.ECDH(to)
	if err != nil {
		return nil, fmt.Errorf("seal node plan: %w", err)
	}
	s := &SealedPlan{
		APIVersion: inplacev1.GroupName + "/" + inplacev1.Version, Kind: SealedPlanKind, Seal: SealX25519AESGCM,
		NodeName: p.NodeName, PlanHash: hash, DesiredState: desired, Recipient: KeyID(to), Ephemeral: eph.PublicKey().Bytes(), Pin: pin,
	}
	aead, err := newAEAD(shared, s.Ephemeral, to.Bytes())
	if err != nil {
		return nil, err
	}
	s.Nonce = make([]byte, aead.NonceSize())
	if _, err := rand.Read(s.Nonce); err != nil {
		return nil, fmt.Errorf("seal node plan: %w", err)
	}
	header, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("seal node plan: %w", err)
	}
	out := make([]byte, 0, len(header)+1+len(plain)+aead.Overhead())
	out = append(append(out, header...), '\n')
	return aead.Seal(out, s.Nonce, plain, header), nil
}

func newAEAD(shared, ephemeral, recipient []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, shared, append(append([]byte{}, ephemeral...), recipient...), sealInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("derive plan key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("derive plan key: %w", err)
	}
	return cipher.NewGCM(block)
}

// DecodeSealedPlan parses and checks the envelope without opening it (the
// coordinator reads what it published this way). A plain NodePlan is refused: plans
// are published sealed only.
func DecodeSealedPlan(data []byte) (*SealedPlan, error) {
	header, ct, ok := bytes.Cut(data, []byte{'\n'})
	if !ok {
		return nil, fmt.Errorf("%w: not a sealed plan (no ciphertext after the header)", ErrInvalidPlan)
	}
	s, err := decodeStrict[SealedPlan](header, "sealed plan header")
	if err != nil {
		return nil, err
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.APIVersion != inplacev1.GroupName+"/"+inplacev1.Version {
		add("apiVersion %q is not %s/%s", s.APIVersion, inplacev1.GroupName, inplacev1.Version)
	}
	if s.Kind != SealedPlanKind {
		add("kind %q is not %s", s.Kind, SealedPlanKind)
	}
	if s.Seal != SealX25519AESGCM {
		add("seal %q is not %s", s.Seal, SealX25519AESGCM)
	}
	if len(s.NodeName) == 0 || len(s.NodeName) > 253 || !nodeNameRE.MatchString(s.NodeName) {
		add("nodeName %q is not a valid node name", s.NodeName)
	}
	if !hexRE.MatchString(s.PlanHash) || !hexRE.MatchString(s.Recipient) || !hexRE.MatchString(s.Pin.BaseHash) {
		add("planHash, recipient and pin.baseHash must be 32 lowercase hex digits")
	}
	if s.DesiredState != "" && !hexRE.MatchString(s.DesiredState) {
		add("desiredState must be 32 lowercase hex digits")
	}
	if len(s.Ephemeral) != 32 {
		add("ephemeral key has %d bytes, want 32", len(s.Ephemeral))
	}
	if len(s.Nonce) != 12 {
		add("nonce has %d bytes, want 12", len(s.Nonce))
	}
	if len(ct) < 16 {
		add("ciphertext has %d bytes, shorter than its tag", len(ct))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, errors.Join(errs...))
	}
	s.Ciphertext, s.header = ct, header
	return s, nil
}

// Open decrypts the plan with the node's private key and checks it against the
// header: same node, same hash. A plan sealed to another key gives a
// *SealedToAnotherKeyError; anything else that does not open or validate wraps
// ErrInvalidPlan.
func (s *SealedPlan) Open(key *ecdh.PrivateKey) (*NodePlan, error) {
	if have := KeyID(key.PublicKey()); have != s.Recipient {
		return nil, &SealedToAnotherKeyError{Recipient: s.Recipient, Have: have}
	}
	eph, err := ecdh.X25519().NewPublicKey(s.Ephemeral)
	if err != nil {
		return nil, fmt.Errorf("%w: ephemeral key: %w", ErrInvalidPlan, err)
	}
	shared, err := key.ECDH(eph)
	if err != nil {
		return nil, fmt.Errorf("%w: key agreement: %w", ErrInvalidPlan, err)
	}
	aead, err := newAEAD(shared, s.Ephemeral, key.PublicKey().Bytes())
	if err != nil {
		return nil, err
	}
	plain, err := aead.Open(nil, s.Nonce, s.Ciphertext, s.header)
	if err != nil {
		return nil, fmt.Errorf("%w: the sealed plan does not open with this node's key (corrupt or altered): %w", ErrInvalidPlan, err)
	}
	p, err := DecodePlan(plain)
	if err != nil {
		return nil, err
	}
	if p.NodeName != s.NodeName {
		return nil, fmt.Errorf("%w: sealed for node %q, the plan names node %q", ErrInvalidPlan, s.NodeName, p.NodeName)
	}
	if hash, err := p.Hash(); err != nil || hash != s.PlanHash {
		return nil, fmt.Errorf("%w: the sealed plan's hash is %s, its header says %s", ErrInvalidPlan, hash, s.PlanHash)
	}
	if s.DesiredState != "" {
		if desired, err := p.DesiredState(); err != nil || desired != s.DesiredState {
			return nil, fmt.Errorf("%w: the sealed plan's desired state is %s, its header says %s", ErrInvalidPlan, desired, s.DesiredState)
		}
	}
	return p, nil
}
