package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// desiredState is what a Machine's spec asks of its node, and nothing else: the
// Kubernetes version and role, the bootstrap config's content (files with their
// resolved content, kubelet args, users, NTP, ClusterConfiguration) and the OS
// image by digest. Left out, because they change without the spec changing: the
// kubeadm action and the etcd snapshot (pinned choices of the first plan), the
// policy's parts (preflight checks, binaries, gates, OS backend configuration,
// the backend name and download source of the image), registry credentials
// (they rotate) and the envelope (apiVersion, the Machine reference). The fields
// are listed here one by one, so a field added to NodePlan stays out until it is
// added on purpose: two extension builds or policies agree on the identity of the
// same spec.
type desiredState struct {
	V                    int             `json:"v"`
	NodeName             string          `json:"nodeName"`
	Role                 Role            `json:"role"`
	Version              string          `json:"version"`
	Files                []File          `json:"files,omitempty"`
	KubeletExtraArgs     []Arg           `json:"kubeletExtraArgs,omitempty"`
	Users                json.RawMessage `json:"users,omitempty"`
	NTP                  json.RawMessage `json:"ntp,omitempty"`
	ClusterConfiguration json.RawMessage `json:"clusterConfiguration,omitempty"`
	OSDigest             string          `json:"osDigest,omitempty"`
}

// desiredStateVersion versions the identity's definition: a change to
// desiredState is a protocol change.
const desiredStateVersion = 1

// DesiredState returns the identity of the desired state the plan carries out:
// the first 16 bytes of the SHA-256 of desiredState's JSON, in hex. Two plans for
// the same Machine spec on the same node have the same identity whatever else
// differs (credentials, policy, the extension replica that built them), so "done"
// compares it, never the plan hash (docs/safety.md, "A false done").
func (p *NodePlan) DesiredState() (string, error) {
	d := desiredState{V: desiredStateVersion, NodeName: p.NodeName, Role: p.Kubernetes.Role, Version: p.Kubernetes.Version,
		Files: p.Files, KubeletExtraArgs: p.KubeletExtraArgs, Users: p.Users, NTP: p.NTP, ClusterConfiguration: p.ClusterConfiguration}
	if p.OS != nil {
		d.OSDigest = p.OS.Digest
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("identify the desired state of node plan: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}
