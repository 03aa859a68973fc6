package mender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans and configuration.
const Name = protocol.BackendMender

// exitNothingInProgress is the exit code of commit/rollback without an update
// in progress, for both mender 3.x and mender-update.
const exitNothingInProgress = 2

// Options configure the mender backend.
type Options struct {
	// Runner runs the Mender tools; required.
	Runner backend.Runner
	// ClientPath is "mender" (3.x) or "mender-update" (4.x+); default "mender".
	ClientPath string
	// ArtifactToolPath defaults to "mender-artifact".
	ArtifactToolPath string
	// Config and DataDir are the client's --config and --data; empty means its defaults.
	Config, DataDir string
	// VerifyKey is the public key Artifacts must be signed with (mender-artifact validate -k).
	VerifyKey string
	// PrintenvPath reads the bootloader environment Mender uses: "fw_printenv"
	// (U-Boot, the default) or "grub-mender-grubenv-print" (GRUB).
	PrintenvPath string
	// StateDir remembers Artifact names across reboots; required.
	StateDir string
	// HostRoot is where the host's root is mounted in the agent's view; the
	// Artifact path is a host path, read here under HostRoot.
	HostRoot string
}

// Backend drives the Mender client.
type Backend struct {
	o Options
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options and returns a backend.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("mender backend: runner is required")
	}
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		return nil, fmt.Errorf("mender backend: state dir %q must be absolute", o.StateDir)
	}
	if o.ClientPath == "" {
		o.ClientPath = "mender"
	}
	if o.ArtifactToolPath == "" {
		o.ArtifactToolPath = "mender-artifact"
	}
	if o.PrintenvPath == "" {
		o.PrintenvPath = "fw_printenv"
	}
	return &Backend{o: o}, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{NeedsReboot: true, SupportsRollback: true, HasMarkGood: true, VerifiesDigest: true}
}

func (b *Backend) client(ctx context.Context, args ...string) (backend.Result, error) {
	var global []string
	if filepath.Base(b.o.ClientPath) == "mender" {
		global = append(global, "--no-syslog")
	}
	if b.o.Config != "" {
		global = append(global, "--config", b.o.Config)
	}
	if b.o.DataDir != "" {
		global = append(global, "--data", b.o.DataDir)
	}
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.ClientPath, Args: append(global, args...)})
}

func (b *Backend) tool(ctx context.Context, args ...string) (backend.Result, error) {
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.ArtifactToolPath, Args: args})
}

func (b *Backend) namePath(hex string) string {
	return filepath.Join(b.o.StateDir, "mender-"+hex+".json")
}

// parseArtifactName reads "Name:" from `mender-artifact read`.
func parseArtifactName(out string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Name:"); ok {
			if name := strings.TrimSpace(v); name != "" {
				return name, nil
			}
		}
	}
	return "", errors.New("no artifact name in mender-artifact read output")
}

// verify checks the file's digest, then the Artifact itself, and remembers its name.
func (b *Backend) verify(ctx context.Context, a backend.Artifact) (string, error) {
	hex, err := a.DigestHex()
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(a.Ref) {
		return "", fmt.Errorf("%w: %q is not an absolute path on the node", backend.ErrArtifactRefused, a.Ref)
	}
	if err := backend.VerifyFile(filepath.Join(b.o.HostRoot, a.Ref), a); err != nil {
		return "", err
	}
	args := []string{"validate"}
	if b.o.VerifyKey != "" {
		args = append(args, "-k", b.o.VerifyKey)
	}
	if _, err := b.tool(ctx, append(args, a.Ref)...); err != nil {
		return "", fmt.Errorf("%w: %w", backend.ErrArtifactRefused, err)
	}
	res, err := b.tool(ctx, "read", "--no-progress", a.Ref)
	if err != nil {
		return "", fmt.Errorf("%w: %w", backend.ErrArtifactRefused, err)
	}
	name, err := parseArtifactName(string(res.Stdout))
	if err != nil {
		return "", fmt.Errorf("%w: %w", backend.ErrArtifactRefused, err)
	}
	data, _ := json.Marshal(map[string]string{"name": name})
	if err := atomicfile.Write(b.namePath(hex), data, 0o600); err != nil {
		return "", fmt.Errorf("remember artifact name: %w", err)
	}
	return name, nil
}

// artifactName returns the remembered name, verifying the file again if needed.
func (b *Backend) artifactName(ctx context.Context, a backend.Artifact) (string, error) {
	hex, err := a.DigestHex()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(b.namePath(hex))
	if errors.Is(err, os.ErrNotExist) {
		return b.verify(ctx, a)
	}
	if err != nil {
		return "", fmt.Errorf("read artifact name: %w", err)
	}
	var m map[string]string
	if err := json.Unmarshal(data, &m); err != nil || m["name"] == "" {
		return "", fmt.Errorf("read artifact name from %s: corrupt", b.namePath(hex))
	}
	return m["name"], nil
}

func (b *Backend) current(ctx context.Context) (string, error) {
	res, err := b.client(ctx, "show-artifact")
	if err != nil {
		return "", fmt.Errorf("mender show-artifact: %w", err)
	}
	return strings.TrimSpace(lastLine(string(res.Stdout))), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// Stage implements backend.Backend: verification only (see the package documentation).
func (b *Backend) Stage(ctx context.Context, a backend.Artifact) error {
	if _, err := b.verify(ctx, a); err != nil {
		return fmt.Errorf("stage %s: %w", a.Ref, err)
	}
	return nil
}

// Activate implements backend.Backend: install into the inactive partition,
// which also makes it the next boot on trial. A marker in StateDir, written
// after a successful install, keeps a repeated Activate (after a crash or
// after the reboot, before commit) from installing over the other partition.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	name, err := b.artifactName(ctx, a)
	if err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	if cur, err := b.current(ctx); err == nil && cur == name {
		return nil // committed and running
	}
	hex, _ := a.DigestHex()
	marker := filepath.Join(b.o.StateDir, "mender-"+hex+".installed")
	if _, err := os.Stat(marker); err == nil {
		env, err := b.bootEnv(ctx)
		if err != nil {
			return fmt.Errorf("activate %s: %w", a.Ref, err)
		}
		if env["upgrade_available"] == "1" {
			return nil // installed and on trial, before or after the reboot
		}
	}
	// The file is checked again right before it is written: it may have changed since Stage.
	if _, err := b.verify(ctx, a); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	if _, err := b.client(ctx, "install", a.Ref); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	if err := atomicfile.Write(marker, []byte(name), 0o600); err != nil {
		return fmt.Errorf("activate %s: record install: %w", a.Ref, err)
	}
	return nil
}

// Verify implements backend.Backend. Mender records the new Artifact name only
// on commit, so before it the running image is recognised the way Mender
// itself does: the trial is still armed (upgrade_available=1; the bootloader
// clears it when it falls back) and the mounted root is the partition
// mender_boot_part points at.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	name, err := b.artifactName(ctx, a)
	if err != nil {
		return err
	}
	cur, err := b.current(ctx)
	if err != nil {
		return err
	}
	if cur == name {
		return nil
	}
	env, err := b.bootEnv(ctx)
	if err != nil {
		return err
	}
	root, err := b.mountedRoot(ctx)
	if err != nil {
		return err
	}
	if err := trialBooted(env, root); err != nil {
		return fmt.Errorf("%w: running artifact %q, want %q: %w", backend.ErrVerifyFailed, cur, name, err)
	}
	return nil
}

// trialBooted decides, from the bootloader environment and the mounted root,
// whether the uncommitted update is what runs (Mender's own matching rule: the
// root device name ends with mender_boot_part).
func trialBooted(env map[string]string, root string) error {
	part := env["mender_boot_part"]
	switch {
	case env["upgrade_available"] != "1":
		return errors.New("no update on trial (upgrade_available is not 1): the bootloader fell back or nothing was installed")
	case part == "" || root == "":
		return fmt.Errorf("cannot tell the running partition (mender_boot_part=%q, root=%q)", part, root)
	case !strings.HasSuffix(root, part):
		return fmt.Errorf("root %s is not partition %s: not rebooted into the update yet", root, part)
	}
	return nil
}

func (b *Backend) bootEnv(ctx context.Context) (map[string]string, error) {
	res, err := b.o.Runner.Run(ctx, backend.Command{Name: b.o.PrintenvPath, Args: []string{"mender_boot_part", "upgrade_available"}})
	if err != nil {
		return nil, fmt.Errorf("read bootloader environment: %w", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			env[k] = v
		}
	}
	return env, nil
}

// mountedRoot reads the device mounted on / from `mount`, as Mender does.
func (b *Backend) mountedRoot(ctx context.Context) (string, error) {
	res, err := b.o.Runner.Run(ctx, backend.Command{Name: "mount"})
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "on" && f[2] == "/" {
			return f[0], nil
		}
	}
	return "", nil
}

// nothingInProgress recognises exit 2 of commit/rollback.
func nothingInProgress(err error) bool {
	var ce *backend.CommandError
	return errors.As(err, &ce) && ce.Result.ExitCode == exitNothingInProgress
}

// Commit implements backend.Backend.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	if err := b.Verify(ctx, a); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if _, err := b.client(ctx, "commit"); err != nil && !nothingInProgress(err) {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	hex, err := a.DigestHex()
	if err != nil {
		return err
	}
	if _, err := b.client(ctx, "rollback"); err != nil && !nothingInProgress(err) {
		return fmt.Errorf("rollback: %w", err)
	}
	if err := os.Remove(filepath.Join(b.o.StateDir, "mender-"+hex+".installed")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}

// Status implements backend.Backend; the image is named by its Artifact name.
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	cur, err := b.current(ctx)
	if err != nil {
		return backend.Status{}, err
	}
	return backend.Status{Booted: cur}, nil
}
