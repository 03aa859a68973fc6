package packages

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
const Name = protocol.BackendPackages

// Manager is the package manager.
type Manager string

const (
	APT Manager = "apt"
	DNF Manager = "dnf"
)

// Options configure the packages backend.
type Options struct {
	// Runner runs the package tools; required.
	Runner backend.Runner
	// Manager is APT or DNF; see DetectManager.
	Manager Manager
	// StateDir keeps the versions installed before an update; required.
	StateDir string
	// RefreshIndex runs `apt-get update` / `dnf makecache` before downloading.
	RefreshIndex bool
	// ExtraArgs are added to every install (e.g. dnf's --disableexcludes=kubernetes).
	ExtraArgs []string
}

// Backend installs pinned package versions.
type Backend struct {
	o Options
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options and returns a backend.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("packages backend: runner is required")
	}
	if o.Manager != APT && o.Manager != DNF {
		return nil, fmt.Errorf("packages backend: manager %q is not %q or %q", o.Manager, APT, DNF)
	}
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		return nil, fmt.Errorf("packages backend: state dir %q must be absolute", o.StateDir)
	}
	return &Backend{o: o}, nil
}

// DetectManager returns APT when apt-get runs, else DNF when dnf runs.
func DetectManager(ctx context.Context, r backend.Runner) (Manager, error) {
	if _, err := r.Run(ctx, backend.Command{Name: "apt-get", Args: []string{"--version"}}); err == nil {
		return APT, nil
	}
	if _, err := r.Run(ctx, backend.Command{Name: "dnf", Args: []string{"--version"}}); err == nil {
		return DNF, nil
	}
	return "", errors.New("neither apt-get nor dnf found")
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{CanStage: true, SupportsRollback: true, VerifiesDigest: true}
}

func (b *Backend) pins(a backend.Artifact) (Pins, string, error) {
	hex, err := a.DigestHex()
	if err != nil {
		return nil, "", err
	}
	p, err := ParsePins(a.Ref)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", backend.ErrArtifactRefused, err)
	}
	if d, _ := Digest(a.Ref); d != a.Digest {
		return nil, "", fmt.Errorf("%w: pin set %s has digest %s, want %s", backend.ErrArtifactRefused, p, d, a.Digest)
	}
	return p, hex, nil
}

func (b *Backend) run(ctx context.Context, name string, args ...string) (backend.Result, error) {
	c := backend.Command{Name: name, Args: args}
	if b.o.Manager == APT {
		c.Env = []string{"DEBIAN_FRONTEND=noninteractive"}
	}
	return b.o.Runner.Run(ctx, c)
}

// installed returns the installed versions of the named packages; missing
// packages are absent from the result (both tools exit non-zero for them).
func (b *Backend) installed(ctx context.Context, names []string) (Pins, error) {
	var res backend.Result
	var err error
	if b.o.Manager == APT {
		res, err = b.run(ctx, "dpkg-query", append([]string{"-W", "-f=${Package}=${Version}\\n"}, names...)...)
	} else {
		res, err = b.run(ctx, "rpm", append([]string{"-q", "--qf", "%{NAME}=%{VERSION}-%{RELEASE}\\n"}, names...)...)
	}
	var ce *backend.CommandError
	if err != nil && (!errors.As(err, &ce) || ce.Result.ExitCode == 127) {
		return nil, fmt.Errorf("query installed packages: %w", err)
	}
	return parseInstalled(string(res.Stdout)), nil
}

// specs renders pins for the manager's install command.
func (b *Backend) specs(p Pins) []string {
	out := make([]string, 0, len(p))
	for _, n := range p.Names() {
		if b.o.Manager == APT {
			out = append(out, n+"="+p[n])
		} else {
			out = append(out, n+"-"+p[n])
		}
	}
	return out
}

// install installs exact versions (downloadOnly: fetch them only).
func (b *Backend) install(ctx context.Context, p Pins, downloadOnly bool) error {
	var args []string
	name := "apt-get"
	if b.o.Manager == APT {
		args = []string{"install", "-y", "-q", "--allow-downgrades", "--allow-change-held-packages"}
		if downloadOnly {
			args = append(args, "--download-only")
		}
	} else {
		name = "dnf"
		args = []string{"install", "-y"}
		if downloadOnly {
			args = append(args, "--downloadonly")
		}
	}
	args = append(append(args, b.o.ExtraArgs...), b.specs(p)...)
	_, err := b.run(ctx, name, args...)
	return err
}

// hold keeps apt from upgrading the pins behind the agent's back (dnf relies on
// the repository's exclude= instead, as the Kubernetes install docs set up).
func (b *Backend) hold(ctx context.Context, names []string) error {
	if b.o.Manager != APT || len(names) == 0 {
		return nil
	}
	if _, err := b.run(ctx, "apt-mark", append([]string{"hold"}, names...)...); err != nil {
		return fmt.Errorf("hold packages: %w", err)
	}
	return nil
}

// record is what Stage remembers for Rollback.
type record struct {
	Pins     string `json:"pins"`
	Previous Pins   `json:"previous"`
}

func (b *Backend) recordPath(hex string) string {
	return filepath.Join(b.o.StateDir, "packages-"+hex+".json")
}

func (b *Backend) loadRecord(hex string) (*record, error) {
	data, err := os.ReadFile(b.recordPath(hex))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read previous versions: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read previous versions: %w", err)
	}
	return &r, nil
}

// notFound recognises apt's and dnf's answers for versions they do not have.
func notFound(err error) bool {
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return false
	}
	msg := string(ce.Result.Stderr) + string(ce.Result.Stdout)
	for _, s := range []string{"was not found", "Unable to locate package", "No match for argument", "Unable to find a match"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Stage implements backend.Backend.
func (b *Backend) Stage(ctx context.Context, a backend.Artifact) error {
	p, hex, err := b.pins(a)
	if err != nil {
		return err
	}
	rec, err := b.loadRecord(hex)
	if err != nil {
		return err
	}
	if rec == nil {
		prev, err := b.installed(ctx, p.Names())
		if err != nil {
			return err
		}
		data, err := json.Marshal(record{Pins: p.String(), Previous: prev})
		if err != nil {
			return err
		}
		if err := atomicfile.Write(b.recordPath(hex), data, 0o600); err != nil {
			return fmt.Errorf("record previous versions: %w", err)
		}
	}
	if b.o.RefreshIndex {
		refresh := []string{"update", "-q"}
		name := "apt-get"
		if b.o.Manager == DNF {
			name, refresh = "dnf", []string{"makecache"}
		}
		if _, err := b.run(ctx, name, refresh...); err != nil {
			return fmt.Errorf("refresh package index: %w", err)
		}
	}
	if err := b.install(ctx, p, true); err != nil {
		if notFound(err) {
			return fmt.Errorf("stage %s: %w: %w", p, backend.ErrArtifactRefused, err)
		}
		return fmt.Errorf("stage %s: %w", p, err)
	}
	return nil
}

// Activate implements backend.Backend.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	p, _, err := b.pins(a)
	if err != nil {
		return err
	}
	inst, err := b.installed(ctx, p.Names())
	if err != nil {
		return err
	}
	if !satisfied(b.o.Manager, inst, p) {
		if err := b.install(ctx, p, false); err != nil {
			return fmt.Errorf("activate %s: %w", p, err)
		}
	}
	return b.hold(ctx, p.Names())
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	p, _, err := b.pins(a)
	if err != nil {
		return err
	}
	inst, err := b.installed(ctx, p.Names())
	if err != nil {
		return err
	}
	if !satisfied(b.o.Manager, inst, p) {
		return fmt.Errorf("%w: installed %s, want %s", backend.ErrVerifyFailed, inst, p)
	}
	return nil
}

// Commit implements backend.Backend: the previous versions are no longer needed.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	if err := b.Verify(ctx, a); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	_, hex, _ := b.pins(a)
	if err := os.Remove(b.recordPath(hex)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	p, hex, err := b.pins(a)
	if err != nil {
		return err
	}
	rec, err := b.loadRecord(hex)
	if err != nil {
		return err
	}
	if rec == nil {
		return nil // never staged: nothing was changed
	}
	inst, err := b.installed(ctx, p.Names())
	if err != nil {
		return err
	}
	restore := Pins{}
	var remove []string
	for _, n := range p.Names() {
		prev, had := rec.Previous[n]
		switch {
		case had && inst[n] != prev:
			restore[n] = prev
		case !had && inst[n] != "":
			remove = append(remove, n)
		}
	}
	if len(restore) > 0 {
		if err := b.install(ctx, restore, false); err != nil {
			return fmt.Errorf("rollback to %s: %w", restore, err)
		}
	}
	if len(remove) > 0 {
		args := append([]string{"remove", "-y"}, remove...)
		name := "apt-get"
		if b.o.Manager == DNF {
			name = "dnf"
		}
		if _, err := b.run(ctx, name, args...); err != nil {
			return fmt.Errorf("rollback: remove %s: %w", strings.Join(remove, " "), err)
		}
	}
	return b.hold(ctx, rec.Previous.Names())
}

// Status implements backend.Backend. Without an artifact it cannot know which
// packages matter, so it reports the Kubernetes packages.
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	inst, err := b.installed(ctx, []string{"kubeadm", "kubectl", "kubelet"})
	if err != nil {
		return backend.Status{}, err
	}
	return backend.Status{Booted: inst.String()}, nil
}
