// Package vmapi is what the OS image lane's test and its helper in the VM
// (test/e2eos/vmhelper) exchange.
package vmapi

import "github.com/capi-inplace/capi-inplace/internal/backend"

// BootsFile is where the helper records every boot that reached its start, on the
// data partition that both slots mount (the RAUC image; the OSTree image keeps it
// in /var, which every deployment shares).
const BootsFile = "/data/boots.jsonl"

// Boot is one boot that reached userspace.
type Boot struct {
	ID           string `json:"id"`
	Slot         string `json:"slot"`
	ImageVersion string `json:"imageVersion"`
	// Deployment is the booted OSTree commit (the OSTree image only).
	Deployment string `json:"deployment,omitempty"`
}

// Facts are what the VM booted, as seen from inside.
type Facts struct {
	// Cmdline is /proc/cmdline; Slot its rauc.slot.
	Cmdline string `json:"cmdline"`
	Slot    string `json:"slot"`
	BootID  string `json:"bootID"`
	// ImageVersion is os-release's IMAGE_VERSION of the running root filesystem.
	ImageVersion string `json:"imageVersion"`
	// Grubenv is GRUB's environment: ORDER and each slot's OK and TRY (RAUC), or
	// boot_counter (OSTree).
	Grubenv map[string]string `json:"grubenv"`
	// Deployment is the booted OSTree deployment's commit, from `ostree admin
	// status`; Deployments lists every deployment's commit, the default first
	// (the OSTree image only).
	Deployment  string   `json:"deployment,omitempty"`
	Deployments []string `json:"deployments,omitempty"`
	// BootTime is `systemd-analyze time` of this boot: firmware, loader, kernel,
	// initrd and userspace, as systemd measured them.
	BootTime string `json:"bootTime,omitempty"`
	// Modules are the kernel modules loaded (/proc/modules): what the image must
	// keep of the kernel's modules.
	Modules []string `json:"modules,omitempty"`
	// Boots are every boot that reached userspace, oldest first.
	Boots []Boot `json:"boots"`
	// Backend is the image's backend's status (RAUC or OSTree, the product's
	// backend); BackendErr when it could not be read.
	Backend    backend.Status `json:"backend"`
	BackendErr string         `json:"backendErr,omitempty"`
}

// The node agent's configuration on the data partition, which both slots mount
// (hack/osimage/rootfs/etc/systemd/system/capi-inplace-agent.service reads it);
// the OSTree image keeps it in /var (hack/osimage/rootfs-ostree).
const (
	AgentConfigDir = "/data/capi-inplace-agent"
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
	// OSTreeRemote, on the OSTree image, is the remote the agent pulls commits
	// from, added to the sysroot's repository (its URL is known only when the
	// test serves the repository; the plan's commit checksum pins the content).
	OSTreeRemote *OSTreeRemote `json:"ostreeRemote,omitempty"`
}

// OSTreeRemote is an OSTree remote: its name in plan refs (<name>:<ref>) and URL.
type OSTreeRemote struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}
