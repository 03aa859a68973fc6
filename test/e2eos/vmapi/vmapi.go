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
	// Boots are every boot that reached userspace, oldest first.
	Boots []Boot `json:"boots"`
	// Backend is the RAUC backend's status; BackendErr when it could not be read.
	Backend    backend.Status `json:"backend"`
	BackendErr string         `json:"backendErr,omitempty"`
}

// Fetched is where the artifact store put a fetched artifact.
type Fetched struct {
	Path string `json:"path"`
}

// StepResult is a backend step's outcome.
type StepResult struct {
	Error        string `json:"error,omitempty"`
	VerifyFailed bool   `json:"verifyFailed,omitempty"`
	Refused      bool   `json:"refused,omitempty"`
}
