package mender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// Name is the backend's name in plans and configuration.
const Name = "mender"

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
	if err := writeFileAtomic(b.namePath(hex), data); err != nil {
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
// which also makes it the next boot on trial.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	name, err := b.artifactName(ctx, a)
	if err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	if cur, err := b.current(ctx); err == nil && cur == name {
		return nil // already running it
	}
	// The file is checked again right before it is written: it may have changed since Stage.
	if _, err := b.verify(ctx, a); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	if _, err := b.client(ctx, "install", a.Ref); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	return nil
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	name, err := b.artifactName(ctx, a)
	if err != nil {
		return err
	}
	cur, err := b.current(ctx)
	if err != nil {
		return err
	}
	if cur != name {
		return fmt.Errorf("%w: running artifact %q, want %q", backend.ErrVerifyFailed, cur, name)
	}
	return nil
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
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	if _, err := b.client(ctx, "rollback"); err != nil && !nothingInProgress(err) {
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

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
