package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/agent/service"
)

// NodeConfigPath is the host path of the agent's node configuration: how this
// node differs from a stock systemd host. A missing file means the defaults.
const NodeConfigPath = "/etc/capi-inplace/node.json"

// NodeConfig is the node configuration file's format (JSON, unknown fields
// refused, so that a misspelt key is an error rather than a silent default).
type NodeConfig struct {
	// ServiceManager selects how services are restarted and the node rebooted;
	// systemd when absent.
	ServiceManager service.Config `json:"serviceManager,omitempty"`
}

// LoadNodeConfig reads the node configuration at hostPath under the host root,
// resolved inside it as every host file is (kube.Host.ReadFile).
func LoadNodeConfig(hostRoot, hostPath string) (NodeConfig, error) {
	var cfg NodeConfig
	raw, err := (&kube.Host{Root: hostRoot}).ReadFile(hostPath)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, fmt.Errorf("read node configuration %s: %w", hostPath, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return NodeConfig{}, fmt.Errorf("parse node configuration %s: %w", hostPath, err)
	}
	if dec.More() {
		return NodeConfig{}, fmt.Errorf("parse node configuration %s: trailing data after the JSON object", hostPath)
	}
	return cfg, nil
}
