// Package vmapi is what the OS image lane's test and its helper in the VM
// (test/e2eos/vmhelper) exchange.
package vmapi

import "github.com/capi-inplace/capi-inplace/internal/backend"

// BootsFile is where the helper records every boot that reached its start, on the
// data partition that both slots mount.
const BootsFile = "/data/boots.jsonl"

// Boot is one boot that reached userspace.
type Boot struct {
	ID           string `json:"id"`
	Slot         string `json:"slot"`
	ImageVersion string `json:"imageVersion"`
}

// Facts are what the VM booted, as seen from inside.
type Facts struct {
	// Cmdline is /proc/cmdline; Slot its rauc.slot.
	Cmdline string `json:"cmdline"`
	Slot    string `json:"slot"`
	BootID  string `json:"bootID"`
	// ImageVersion is os-release's IMAGE_VERSION of the running root filesystem.
	ImageVersion string `json:"imageVersion"`
	// Grubenv is GRUB's environment: ORDER and each slot's OK and TRY.
	Grubenv map[string]string `json:"grubenv"`
	// BootTime is `systemd-analyze time` of this boot: firmware, loader, kernel,
	// initrd and userspace, as systemd measured them.
	BootTime string `json:"bootTime,omitempty"`
	// Modules are the kernel modules loaded (/proc/modules): what the image must
	// keep of the kernel's modules.
	Modules []string `json:"modules,omitempty"`
	// Boots are every boot that reached userspace, oldest first.
	Boots []Boot `json:"boots"`
	// Backend is the RAUC backend's status; BackendErr when it could not be read.
	Backend    backend.Status `json:"backend"`
	BackendErr string         `json:"backendErr,omitempty"`
}

// The node agent's configuration on the data partition, which both slots mount
// (hack/osimage/rootfs/etc/systemd/system/capi-inplace-agent.service reads it).
const (
	AgentConfigDir  = "/data/capi-inplace-agent"
	AgentKubeconfig = AgentConfigDir + "/kubeconfig"
	AgentEnv        = AgentConfigDir + "/env"
	// AgentUnit is the agent's systemd unit in the image.
	AgentUnit = "capi-inplace-agent.service"
	// AgentJournal is the agent's journal at its default state directory
	// (lanekit.AgentJournal; not imported here, to keep client-go out of the helper).
	AgentJournal = "/var/lib/capi-inplace/journal.json"
)

// AgentConfig is what a node's bootstrap gives the agent: its credentials for the
// API server and its node's name.
type AgentConfig struct {
	Kubeconfig []byte `json:"kubeconfig"`
	NodeName   string `json:"nodeName"`
}
