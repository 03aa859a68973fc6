package bootc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans and configuration.
const Name = protocol.BackendBootc

// Options configure the bootc backend.
type Options struct {
	// Runner runs bootc; required.
	Runner backend.Runner
	// BootcPath defaults to "bootc".
	BootcPath string
	// EnforceSigPolicy passes --enforce-container-sigpolicy to bootc switch, so
	// that /etc/containers/policy.json signature rules apply.
	EnforceSigPolicy bool
}

// Backend drives bootc.
type Backend struct {
	o Options
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options and returns a backend.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("bootc backend: runner is required")
	}
	if o.BootcPath == "" {
		o.BootcPath = "bootc"
	}
	return &Backend{o: o}, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{NeedsReboot: true, SupportsRollback: true, VerifiesDigest: true}
}

// pinned returns "<repository>@<digest>" for an artifact, refusing a reference
// that pins a different digest.
func pinned(a backend.Artifact) (string, error) {
	if _, err := a.DigestHex(); err != nil {
		return "", err
	}
	ref := strings.TrimPrefix(a.Ref, "docker://")
	if ref == "" {
		return "", fmt.Errorf("%w: empty image reference", backend.ErrArtifactRefused)
	}
	repo, dig, hasDigest := strings.Cut(ref, "@")
	if hasDigest && dig != a.Digest {
		return "", fmt.Errorf("%w: reference %s pins %s, not %s", backend.ErrArtifactRefused, a.Ref, dig, a.Digest)
	}
	// Drop a tag: a ':' after the last '/' (a ':' before it is a registry port).
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo + "@" + a.Digest, nil
}

func (b *Backend) bootc(ctx context.Context, args ...string) (backend.Result, error) {
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.BootcPath, Args: args})
}

func (b *Backend) host(ctx context.Context) (Host, error) {
	res, err := b.bootc(ctx, "status", "--json")
	if err != nil {
		return Host{}, fmt.Errorf("bootc status: %w", err)
	}
	return parseHost(res.Stdout)
}

// Stage implements backend.Backend. bootc cannot download without staging for
// the next boot, so this only validates the reference.
func (b *Backend) Stage(_ context.Context, a backend.Artifact) error {
	_, err := pinned(a)
	return err
}

// refusal reports whether bootc failed because the image itself is wrong: the
// registry has no such manifest, or its content does not match the digest.
func refusal(err error) bool {
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return false
	}
	msg := strings.ToLower(string(ce.Result.Stderr))
	for _, s := range []string{"manifest unknown", "does not match", "digest mismatch", "signature"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Activate implements backend.Backend.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	ref, err := pinned(a)
	if err != nil {
		return err
	}
	h, err := b.host(ctx)
	if err != nil {
		return err
	}
	if h.nextBoot() == a.Digest {
		return nil
	}
	args := []string{"switch"}
	if b.o.EnforceSigPolicy {
		args = append(args, "--enforce-container-sigpolicy")
	}
	if _, err := b.bootc(ctx, append(args, ref)...); err != nil {
		if refusal(err) {
			return fmt.Errorf("activate %s: %w: %w", ref, backend.ErrArtifactRefused, err)
		}
		return fmt.Errorf("activate %s: %w", ref, err)
	}
	return nil
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	h, err := b.host(ctx)
	if err != nil {
		return err
	}
	if got := h.Status.Booted.digest(); got != a.Digest {
		return fmt.Errorf("%w: booted image is %s (%s), want %s", backend.ErrVerifyFailed, got, h.Status.Booted.ref(), a.Digest)
	}
	return nil
}

// Commit implements backend.Backend; bootc has no mark-good of its own.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	return b.Verify(ctx, a)
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	// At most: discard the staged image (which queues the rollback entry), then
	// toggle the queue back to the booted one.
	for range 3 {
		h, err := b.host(ctx)
		if err != nil {
			return err
		}
		done, err := rollbackStep(h, a.Digest)
		if err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
		if done {
			return nil
		}
		if _, err := b.bootc(ctx, "rollback"); err != nil {
			return fmt.Errorf("rollback: %w", err)
		}
	}
	return errors.New("rollback: bootc did not reach the previous image as next boot")
}

// Status implements backend.Backend; images are named by digest.
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	h, err := b.host(ctx)
	if err != nil {
		return backend.Status{}, err
	}
	st := backend.Status{Booted: h.Status.Booted.digest(), Rollback: h.Status.Rollback.digest()}
	if next := h.nextBoot(); next != st.Booted {
		st.Staged = next
	}
	return st, nil
}
