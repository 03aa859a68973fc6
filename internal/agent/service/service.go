// Package service is the agent's view of the node's service manager: reload unit
// definitions, restart a service (the kubelet, the NTP client) and reboot. Real
// nodes run systemd, which is the default; a node without systemd (the real-node
// test lane, appliances with another init) names the commands to run instead in
// the node configuration file (see docs/agent-node.md).
//
// Every command goes through backend.Runner, so it runs on the host (chrooted into
// the host root by the agent's runner) and the simulated host can stand in.
//
// Imports: internal/backend and the standard library.
package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// Manager manages the node's services.
type Manager interface {
	// DaemonReload makes the service manager re-read service definitions (kubeadm
	// and packages change the kubelet's drop-ins).
	DaemonReload(ctx context.Context) error
	// Restart restarts one service by its unit name ("kubelet", "chrony").
	Restart(ctx context.Context, unit string) error
	// Reboot asks for a reboot and returns once the request was accepted; the
	// process is killed by the shutdown that follows.
	Reboot(ctx context.Context) error
}

// Service manager types of the node configuration.
const (
	TypeSystemd = "systemd"
	TypeCommand = "command"
)

// KubeletUnit is the kubelet's unit name.
const KubeletUnit = "kubelet"

// Config selects and configures the service manager (the "serviceManager"
// section of the node configuration). The zero value is systemd.
type Config struct {
	// Type is "systemd" (default when empty) or "command".
	Type string `json:"type,omitempty"`
	// RestartKubelet is the command (argv, a host path first) that restarts the
	// kubelet; required with type command.
	RestartKubelet []string `json:"restartKubelet,omitempty"`
	// DaemonReload is run before a restart; empty means there is nothing to reload.
	DaemonReload []string `json:"daemonReload,omitempty"`
	// Reboot reboots the node; empty means the node cannot be rebooted by the
	// agent, and a plan that needs a reboot fails with that message.
	Reboot []string `json:"reboot,omitempty"`
}

// ErrNotConfigured is wrapped when the command service manager has no command for
// what it was asked to do.
var ErrNotConfigured = errors.New("not configured in the node's serviceManager")

// New builds the manager cfg describes, running its commands with r.
func New(cfg Config, r backend.Runner) (Manager, error) {
	switch cfg.Type {
	case "", TypeSystemd:
		if len(cfg.RestartKubelet)+len(cfg.DaemonReload)+len(cfg.Reboot) > 0 {
			return nil, errors.New("serviceManager: restartKubelet, daemonReload and reboot apply to type command only")
		}
		return Systemd{Runner: r}, nil
	case TypeCommand:
		if len(cfg.RestartKubelet) == 0 || cfg.RestartKubelet[0] == "" {
			return nil, errors.New("serviceManager: type command needs restartKubelet (a command and its arguments)")
		}
		for name, argv := range map[string][]string{"daemonReload": cfg.DaemonReload, "reboot": cfg.Reboot} {
			if len(argv) > 0 && argv[0] == "" {
				return nil, fmt.Errorf("serviceManager: %s has an empty command name", name)
			}
		}
		return Command{Runner: r, RestartKubelet: cfg.RestartKubelet, DaemonReloadCmd: cfg.DaemonReload, RebootCmd: cfg.Reboot}, nil
	}
	return nil, fmt.Errorf("serviceManager: type %q is not %q or %q", cfg.Type, TypeSystemd, TypeCommand)
}

// Systemd manages services with systemctl.
type Systemd struct {
	Runner backend.Runner
}

// DaemonReload implements Manager.
func (s Systemd) DaemonReload(ctx context.Context) error {
	return s.systemctl(ctx, "daemon-reload")
}

// Restart implements Manager.
func (s Systemd) Restart(ctx context.Context, unit string) error {
	return s.systemctl(ctx, "restart", unit)
}

// Reboot implements Manager.
func (s Systemd) Reboot(ctx context.Context) error {
	return s.systemctl(ctx, "reboot")
}

func (s Systemd) systemctl(ctx context.Context, args ...string) error {
	if _, err := s.Runner.Run(ctx, backend.Command{Name: "systemctl", Args: args}); err != nil {
		return err
	}
	return nil
}

// Command manages services with commands the node configuration names.
type Command struct {
	Runner          backend.Runner
	RestartKubelet  []string
	DaemonReloadCmd []string
	RebootCmd       []string
}

// DaemonReload implements Manager; without a command there is nothing to reload.
func (c Command) DaemonReload(ctx context.Context) error {
	if len(c.DaemonReloadCmd) == 0 {
		return nil
	}
	return c.run(ctx, c.DaemonReloadCmd)
}

// Restart implements Manager; only the kubelet has a configured command.
func (c Command) Restart(ctx context.Context, unit string) error {
	if unit != KubeletUnit {
		return fmt.Errorf("restart %s: %w (only the kubelet's restart command is)", unit, ErrNotConfigured)
	}
	return c.run(ctx, c.RestartKubelet)
}

// Reboot implements Manager.
func (c Command) Reboot(ctx context.Context) error {
	if len(c.RebootCmd) == 0 {
		return fmt.Errorf("reboot: %w", ErrNotConfigured)
	}
	return c.run(ctx, c.RebootCmd)
}

func (c Command) run(ctx context.Context, argv []string) error {
	if _, err := c.Runner.Run(ctx, backend.Command{Name: argv[0], Args: argv[1:]}); err != nil {
		return err
	}
	return nil
}
