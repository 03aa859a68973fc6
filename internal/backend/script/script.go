package script

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans and configuration.
const Name = protocol.BackendScript

// Exit codes of the script contract (see the package documentation).
const (
	ExitRefused     = 2
	ExitVerifyFail  = 3
	ExitUnsupported = 4
)

// Environment variables passed to the script.
const (
	EnvAction = "CAPI_INPLACE_ACTION"
	EnvRef    = "CAPI_INPLACE_ARTIFACT_REF"
	EnvDigest = "CAPI_INPLACE_ARTIFACT_DIGEST"
)

// Options configure the script backend.
type Options struct {
	// Runner runs the script; required.
	Runner backend.Runner
	// Path is the absolute path of the executable; required.
	Path string
	// Capabilities are what the script honestly supports.
	Capabilities backend.Capabilities
}

// Backend runs a user script. It is safe for concurrent use if the script is.
type Backend struct {
	opts Options
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options and returns a backend.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("script backend: runner is required")
	}
	if o.Path == "" || !filepath.IsAbs(o.Path) {
		return nil, fmt.Errorf("script backend: path %q must be absolute", o.Path)
	}
	return &Backend{opts: o}, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend; they are declared by the operator.
func (b *Backend) Capabilities() backend.Capabilities { return b.opts.Capabilities }

// Stage implements backend.Backend.
func (b *Backend) Stage(ctx context.Context, a backend.Artifact) error {
	return b.act(ctx, "stage", a)
}

// Activate implements backend.Backend.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	return b.act(ctx, "activate", a)
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	return b.act(ctx, "verify", a)
}

// Commit implements backend.Backend.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	return b.act(ctx, "commit", a)
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	return b.act(ctx, "rollback", a)
}

// Status implements backend.Backend.
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	r, err := b.run(ctx, "status", backend.Artifact{})
	if err != nil {
		return backend.Status{}, err
	}
	return backend.Status{Booted: r.Booted, Staged: r.Staged, Rollback: r.Rollback}, nil
}

func (b *Backend) act(ctx context.Context, action string, a backend.Artifact) error {
	// The digest is checked here too, so that a script never sees a malformed one.
	if _, err := a.DigestHex(); err != nil {
		return fmt.Errorf("script %s: %w", action, err)
	}
	_, err := b.run(ctx, action, a)
	return err
}

// Reply is the JSON a script prints on stdout.
type Reply struct {
	OK       *bool  `json:"ok,omitempty"`
	Message  string `json:"message,omitempty"`
	Booted   string `json:"booted,omitempty"`
	Staged   string `json:"staged,omitempty"`
	Rollback string `json:"rollback,omitempty"`
}

func (b *Backend) run(ctx context.Context, action string, a backend.Artifact) (Reply, error) {
	cmd := backend.Command{
		Name: b.opts.Path,
		Args: []string{action},
		Env:  []string{EnvAction + "=" + action, EnvRef + "=" + a.Ref, EnvDigest + "=" + a.Digest},
	}
	res, runErr := b.opts.Runner.Run(ctx, cmd)
	reply, parseErr := parseReply(res.Stdout)
	if err := outcome(action, res.ExitCode, runErr, reply, parseErr); err != nil {
		return reply, err
	}
	return reply, nil
}

// parseReply reads the optional JSON reply; empty output is no reply.
func parseReply(stdout []byte) (Reply, error) {
	var r Reply
	s := bytes.TrimSpace(stdout)
	if len(s) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(s, &r); err != nil {
		return r, fmt.Errorf("stdout is not a JSON reply: %w", err)
	}
	return r, nil
}

// outcome maps an exit code and reply to the backend's error contract.
func outcome(action string, exit int, runErr error, r Reply, parseErr error) error {
	msg := r.Message
	if msg == "" && runErr != nil {
		msg = runErr.Error()
	}
	switch {
	case runErr == nil && parseErr != nil:
		return fmt.Errorf("script %s: %w", action, parseErr)
	case runErr == nil && r.OK != nil && !*r.OK:
		return fmt.Errorf("script %s: reported failure: %s", action, msg)
	case runErr == nil:
		return nil
	case exit == ExitRefused:
		return fmt.Errorf("script %s: %w: %s", action, backend.ErrArtifactRefused, msg)
	case exit == ExitVerifyFail:
		return fmt.Errorf("script %s: %w: %s", action, backend.ErrVerifyFailed, msg)
	case exit == ExitUnsupported:
		return fmt.Errorf("script %s: %w: %s", action, backend.ErrUnsupported, msg)
	default:
		return fmt.Errorf("script %s: %w", action, runErr)
	}
}
