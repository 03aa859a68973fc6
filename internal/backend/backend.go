package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Capabilities are what a backend can honestly do. The agent plans its steps from
// them (no reboot step without NeedsReboot, no rollback promise without
// SupportsRollback) and the plan command reports them to operators.
type Capabilities struct {
	// CanStage: the new image can be written while the old one keeps running.
	CanStage bool `json:"canStage"`
	// NeedsReboot: the new image takes effect only after a reboot.
	NeedsReboot bool `json:"needsReboot"`
	// SupportsRollback: the previous image can be restored after Activate.
	SupportsRollback bool `json:"supportsRollback"`
	// HasMarkGood: the mechanism has boot counting ended by an explicit commit.
	HasMarkGood bool `json:"hasMarkGood"`
	// VerifiesDigest: the artifact's digest is checked before anything changes.
	VerifiesDigest bool `json:"verifiesDigest"`
}

// Artifact is the OS image a node must run.
type Artifact struct {
	// Ref is the backend-specific reference (OCI ref, ostree ref, bundle URL or path).
	Ref string
	// Digest is "sha256:<hex>".
	Digest string
}

// DigestHex returns the hex part of a "sha256:<hex>" digest (protocol.DigestHex:
// the one digest rule of plans, policy and backends).
func (a Artifact) DigestHex() (string, error) {
	h, err := protocol.DigestHex(a.Digest)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrArtifactRefused, err)
	}
	return h, nil
}

// Status is what a backend reports about the node's images.
type Status struct {
	// Booted identifies the running image (checksum, slot or version).
	Booted string `json:"booted"`
	// Staged identifies the image that boots next, if different from Booted.
	Staged string `json:"staged,omitempty"`
	// Rollback identifies the image a rollback returns to, if any.
	Rollback string `json:"rollback,omitempty"`
}

// Backend swaps the node's OS image. See the package documentation for the contract.
type Backend interface {
	// Name is the backend's name as used in plans and configuration.
	Name() string
	Capabilities() Capabilities
	Stage(ctx context.Context, a Artifact) error
	Activate(ctx context.Context, a Artifact) error
	Verify(ctx context.Context, a Artifact) error
	Commit(ctx context.Context, a Artifact) error
	Rollback(ctx context.Context, a Artifact) error
	Status(ctx context.Context) (Status, error)
}

var (
	// ErrArtifactRefused means the artifact is corrupt, unsigned or does not match its
	// digest; nothing was changed. It is terminal for the plan.
	ErrArtifactRefused = errors.New("artifact refused")
	// ErrVerifyFailed means the running image is not the expected one (the node
	// booted the old image, or the new one is broken).
	ErrVerifyFailed = errors.New("image verification failed")
	// ErrUnsupported means the backend cannot perform the operation at all.
	ErrUnsupported = errors.New("operation not supported by backend")
)
