package agent

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// NodeKeyFile is the node's private key in the agent's state directory (on the
// host's disk, next to the journal): PEM, PKCS #8, X25519, mode 0600.
const NodeKeyFile = "node-key.pem"

// LoadOrCreateNodeKey returns the node's private key from dir, generating and
// storing it on first start. The key never leaves the host: only its public half is
// published (on the Node), and the coordinator seals this node's plans to it. A lost
// key costs nothing but a re-seal: a new key is published, and the coordinator
// seals the plan to it on its next call. A key file that does not parse is refused
// rather than replaced, since nothing but tampering can produce one (it is written
// atomically).
func LoadOrCreateNodeKey(dir string) (*ecdh.PrivateKey, error) {
	path := filepath.Join(dir, NodeKeyFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return createNodeKey(path)
	case err != nil:
		return nil, fmt.Errorf("read node key: %w", err)
	}
	key, err := parseNodeKey(data)
	if err != nil {
		return nil, fmt.Errorf("node key %s: %w (remove it and restart the agent to make a new one; the coordinator seals the plan to the new key)", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("restrict node key %s to its owner: %w", path, err)
		}
	}
	return key, nil
}

func createNodeKey(path string) (*ecdh.PrivateKey, error) {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate node key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode node key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create the agent's state directory: %w", err)
	}
	if err := atomicfile.Write(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("store node key: %w", err)
	}
	return key, nil
}

func parseNodeKey(data []byte) (*ecdh.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("not a PEM PRIVATE KEY")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*ecdh.PrivateKey)
	if !ok || key.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("a %T, not an X25519 key", k)
	}
	return key, nil
}

// publishKey puts the node's public key on its Node (the agent-key annotation)
// unless it is there already. The coordinator publishes no plan before it is.
func (a *Agent) publishKey(ctx context.Context, node *corev1.Node) error {
	want := protocol.FormatAgentKey(a.Key.PublicKey())
	if node.Annotations[inplacev1.AgentKeyAnnotation] == want {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{inplacev1.AgentKeyAnnotation: want}}})
	if err != nil {
		return fmt.Errorf("encode key patch: %w", err)
	}
	if _, err := a.Client.CoreV1().Nodes().Patch(ctx, a.NodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "capi-inplace-agent"}); err != nil {
		return fmt.Errorf("publish the node key on node %s: %w", a.NodeName, err)
	}
	a.Log.Info("Published the node key", "node", a.NodeName, "key", protocol.KeyID(a.Key.PublicKey()))
	return nil
}
