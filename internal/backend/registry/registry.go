package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/backend/bootc"
	"github.com/capi-inplace/capi-inplace/internal/backend/mender"
	"github.com/capi-inplace/capi-inplace/internal/backend/ostree"
	"github.com/capi-inplace/capi-inplace/internal/backend/packages"
	"github.com/capi-inplace/capi-inplace/internal/backend/rauc"
	"github.com/capi-inplace/capi-inplace/internal/backend/script"
	"github.com/capi-inplace/capi-inplace/internal/backend/swupdate"
)

// ConfigPath is the host path of a node's OS backend configuration.
const ConfigPath = "/etc/capi-inplace/os-backends.json"

// DefaultStateDir is the host directory where backends keep what they must
// remember across reboots (one subdirectory per backend).
const DefaultStateDir = "/var/lib/capi-inplace/os-backends"

// Config is the node's OS backend configuration; a nil section is a backend
// the node does not have.
type Config struct {
	StateDir string          `json:"stateDir,omitempty"`
	OSTree   *OSTreeConfig   `json:"ostree,omitempty"`
	Bootc    *BootcConfig    `json:"bootc,omitempty"`
	RAUC     *RAUCConfig     `json:"rauc,omitempty"`
	SWUpdate *SWUpdateConfig `json:"swupdate,omitempty"`
	Mender   *MenderConfig   `json:"mender,omitempty"`
	Packages *PackagesConfig `json:"packages,omitempty"`
	Script   *ScriptConfig   `json:"script,omitempty"`
}

// OSTreeConfig configures the ostree backend.
type OSTreeConfig struct {
	Sysroot string `json:"sysroot,omitempty"`
	OSName  string `json:"osName,omitempty"`
	// Flavor is "ostree", "rpm-ostree" or "" to detect rpm-ostree.
	Flavor     string   `json:"flavor,omitempty"`
	DeployArgs []string `json:"deployArgs,omitempty"`
}

// BootcConfig configures the bootc backend.
type BootcConfig struct {
	EnforceSigPolicy bool `json:"enforceSigPolicy,omitempty"`
}

// RAUCConfig configures the rauc backend.
type RAUCConfig struct {
	Conf    string `json:"conf,omitempty"`
	Keyring string `json:"keyring,omitempty"`
}

// SWUpdateConfig configures the swupdate backend.
type SWUpdateConfig struct {
	Slots      []swupdate.Slot `json:"slots"`
	SlotVar    string          `json:"slotVar,omitempty"`
	EnvConfig  string          `json:"envConfig,omitempty"`
	PublicKey  string          `json:"publicKey,omitempty"`
	HWRevision string          `json:"hwRevision,omitempty"`
	ExtraArgs  []string        `json:"extraArgs,omitempty"`
}

// MenderConfig configures the mender backend.
type MenderConfig struct {
	// Client is "mender" (3.x) or "mender-update" (4.x+).
	Client    string `json:"client,omitempty"`
	Config    string `json:"config,omitempty"`
	DataDir   string `json:"dataDir,omitempty"`
	VerifyKey string `json:"verifyKey,omitempty"`
	// Printenv reads the bootloader environment: "fw_printenv" (default) or
	// "grub-mender-grubenv-print".
	Printenv string `json:"printenv,omitempty"`
}

// PackagesConfig configures the packages backend.
type PackagesConfig struct {
	// Manager is "apt", "dnf" or "" to detect.
	Manager      string   `json:"manager,omitempty"`
	RefreshIndex bool     `json:"refreshIndex,omitempty"`
	ExtraArgs    []string `json:"extraArgs,omitempty"`
}

// ScriptConfig configures the script backend.
type ScriptConfig struct {
	Path         string               `json:"path"`
	Capabilities backend.Capabilities `json:"capabilities"`
}

// Env is what every backend is built with.
type Env struct {
	// HostRoot is the host's root in the agent's view ("/" on the host).
	HostRoot string
	// Runner runs commands on the host.
	Runner backend.Runner
	// PinDir creates the host directory dir (its missing parents too) resolved
	// inside the host root, and returns a path to it in the agent's view that a
	// symlink on the way cannot send out of the root (the agent's kube.Host.PinDir).
	// Backends keep their state there. Nil: the directory under HostRoot, as
	// named, for a caller that runs no backend step (the CLI's plan).
	PinDir func(dir string) (string, error)
}

// ReadHostFile reads a host file resolved inside the host root, never through a
// symlink out of it (the agent's kube.Host.ReadFile); a missing file is an error
// matching os.ErrNotExist.
type ReadHostFile func(hostPath string) ([]byte, error)

// Load reads the configuration (ConfigPath) through read and builds its
// backends. A missing file means no configured backends.
func Load(ctx context.Context, env Env, read ReadHostFile) (map[string]backend.Backend, error) {
	data, err := read(ConfigPath)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]backend.Backend{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read OS backend configuration: %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ConfigPath, err)
	}
	return Build(ctx, cfg, env), nil
}

// Build builds the configured backends. Detection of rpm-ostree and of the
// package manager runs commands, bounded by ctx.
func Build(ctx context.Context, cfg Config, env Env) map[string]backend.Backend {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stateRoot := cfg.StateDir
	if stateRoot == "" {
		stateRoot = DefaultStateDir
	}
	out := map[string]backend.Backend{}
	add := func(name string, b backend.Backend, err error) {
		if err != nil {
			out[name] = Unavailable{BackendName: name, Err: err}
			return
		}
		out[name] = b
	}
	// withState builds a backend that keeps state, in its own directory under
	// the state root; a directory that cannot be had makes the backend unavailable.
	withState := func(name string, build func(stateDir string) (backend.Backend, error)) {
		dir := path.Join(stateRoot, name)
		stateDir := filepath.Join(env.HostRoot, dir)
		if env.PinDir != nil {
			var err error
			if stateDir, err = env.PinDir(dir); err != nil {
				add(name, nil, fmt.Errorf("%s backend: state directory %s: %w", name, dir, err))
				return
			}
		}
		b, err := build(stateDir)
		add(name, b, err)
	}
	if c := cfg.OSTree; c != nil {
		flavor := ostree.Flavor(c.Flavor)
		if flavor == "" {
			flavor = ostree.DetectFlavor(ctx, env.Runner, "")
		}
		b, err := ostree.New(ostree.Options{Runner: env.Runner, Sysroot: c.Sysroot, OSName: c.OSName, Flavor: flavor, DeployArgs: c.DeployArgs})
		add(ostree.Name, b, err)
	}
	if c := cfg.Bootc; c != nil {
		b, err := bootc.New(bootc.Options{Runner: env.Runner, EnforceSigPolicy: c.EnforceSigPolicy})
		add(bootc.Name, b, err)
	}
	if c := cfg.RAUC; c != nil {
		withState(rauc.Name, func(dir string) (backend.Backend, error) {
			return rauc.New(rauc.Options{Runner: env.Runner, Conf: c.Conf, Keyring: c.Keyring, StateDir: dir, HostRoot: env.HostRoot})
		})
	}
	if c := cfg.SWUpdate; c != nil {
		withState(swupdate.Name, func(dir string) (backend.Backend, error) {
			return swupdate.New(swupdate.Options{Runner: env.Runner, Slots: c.Slots, StateDir: dir, SlotVar: c.SlotVar,
				EnvConfig: c.EnvConfig, PublicKey: c.PublicKey, HWRevision: c.HWRevision, ExtraArgs: c.ExtraArgs, HostRoot: env.HostRoot})
		})
	}
	if c := cfg.Mender; c != nil {
		withState(mender.Name, func(dir string) (backend.Backend, error) {
			return mender.New(mender.Options{Runner: env.Runner, ClientPath: c.Client, Config: c.Config, DataDir: c.DataDir,
				VerifyKey: c.VerifyKey, PrintenvPath: c.Printenv, StateDir: dir, HostRoot: env.HostRoot})
		})
	}
	if c := cfg.Packages; c != nil {
		m := packages.Manager(c.Manager)
		var err error
		if m == "" {
			m, err = packages.DetectManager(ctx, env.Runner)
		}
		if err != nil {
			add(packages.Name, nil, err)
		} else {
			withState(packages.Name, func(dir string) (backend.Backend, error) {
				return packages.New(packages.Options{Runner: env.Runner, Manager: m, StateDir: dir, RefreshIndex: c.RefreshIndex, ExtraArgs: c.ExtraArgs})
			})
		}
	}
	if c := cfg.Script; c != nil {
		b, err := script.New(script.Options{Runner: env.Runner, Path: c.Path, Capabilities: c.Capabilities})
		add(script.Name, b, err)
	}
	return out
}

// Unavailable is a configured backend that could not be built: every call
// fails with the configuration error.
type Unavailable struct {
	BackendName string
	Err         error
}

var _ backend.Backend = Unavailable{}

func (u Unavailable) err() error {
	return fmt.Errorf("OS backend %s is misconfigured in %s: %w", u.BackendName, ConfigPath, u.Err)
}

// Name implements backend.Backend.
func (u Unavailable) Name() string { return u.BackendName }

// Capabilities implements backend.Backend: nothing.
func (u Unavailable) Capabilities() backend.Capabilities { return backend.Capabilities{} }

// Stage implements backend.Backend.
func (u Unavailable) Stage(context.Context, backend.Artifact) error { return u.err() }

// Activate implements backend.Backend.
func (u Unavailable) Activate(context.Context, backend.Artifact) error { return u.err() }

// Verify implements backend.Backend.
func (u Unavailable) Verify(context.Context, backend.Artifact) error { return u.err() }

// Commit implements backend.Backend.
func (u Unavailable) Commit(context.Context, backend.Artifact) error { return u.err() }

// Rollback implements backend.Backend.
func (u Unavailable) Rollback(context.Context, backend.Artifact) error { return u.err() }

// Status implements backend.Backend.
func (u Unavailable) Status(context.Context) (backend.Status, error) {
	return backend.Status{}, u.err()
}

// Parse reads an OS backend configuration strictly: unknown fields are refused,
// so that a misspelt key in a pool's policy is an error rather than a backend
// that silently keeps its defaults.
func Parse(data []byte) (Config, error) {
	var cfg Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("OS backend configuration: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("OS backend configuration: trailing data after the JSON object")
	}
	return cfg, nil
}
