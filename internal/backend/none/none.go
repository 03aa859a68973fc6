// Package none is the OS backend for Kubernetes-only updates: it never changes
// the OS image. Its capabilities are all false, because it can do none of those
// things; the agent therefore never plans a backend step with it, and the agent
// refuses any plan that asks it to switch an OS image.
//
// Imports: internal/backend only.
package none

import (
	"context"
	"fmt"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans.
const Name = protocol.BackendNone

// Backend is the none backend.
type Backend struct{}

var _ backend.Backend = Backend{}

// New returns the none backend.
func New() Backend { return Backend{} }

// Name implements backend.Backend.
func (Backend) Name() string { return Name }

// Capabilities implements backend.Backend: nothing, honestly.
func (Backend) Capabilities() backend.Capabilities { return backend.Capabilities{} }

func unsupported(op string) error {
	return fmt.Errorf("backend %s: %s: %w", Name, op, backend.ErrUnsupported)
}

// Stage implements backend.Backend.
func (Backend) Stage(context.Context, backend.Artifact) error { return unsupported("stage") }

// Activate implements backend.Backend.
func (Backend) Activate(context.Context, backend.Artifact) error { return unsupported("activate") }

// Verify implements backend.Backend.
func (Backend) Verify(context.Context, backend.Artifact) error { return unsupported("verify") }

// Commit implements backend.Backend.
func (Backend) Commit(context.Context, backend.Artifact) error { return unsupported("commit") }

// Rollback implements backend.Backend: nothing was changed, so there is nothing
// to undo (the contract makes Rollback a no-op when nothing changed).
func (Backend) Rollback(context.Context, backend.Artifact) error { return nil }

// Status implements backend.Backend.
func (Backend) Status(context.Context) (backend.Status, error) {
	return backend.Status{Booted: "unmanaged"}, nil
}
