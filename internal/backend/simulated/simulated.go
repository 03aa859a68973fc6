package simulated

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

// Name is the backend's name in plans.
const Name = protocol.BackendSimulated

// InitialRef is the image a fresh simulated host boots.
const InitialRef = "sim:initial"

// Dir is the store's directory relative to the host root.
const Dir = "var/lib/capi-inplace-sim/os"

// Backend is the simulated A/B backend.
type Backend struct {
	hostRoot string
}

var _ backend.Backend = &Backend{}

// New returns a simulated backend whose store lives under hostRoot.
func New(hostRoot string) *Backend { return &Backend{hostRoot: hostRoot} }

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend: an A/B store can do all of it.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{CanStage: true, NeedsReboot: true, SupportsRollback: true, HasMarkGood: true, VerifiesDigest: true}
}

type store struct {
	Booted   string `json:"booted"`
	Next     string `json:"next"`
	Fallback string `json:"fallback,omitempty"`
	Good     bool   `json:"good"`
}

type meta struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

func (b *Backend) dir(parts ...string) string {
	return filepath.Join(append([]string{b.hostRoot, Dir}, parts...)...)
}

func other(slot string) string {
	if slot == "a" {
		return "b"
	}
	return "a"
}

// DigestOf returns the digest the simulated backend expects for a "sim:" ref.
func DigestOf(content []byte) string { return protocol.DigestOf(content) }

// load reads the store, initialising it with slot a booting InitialRef.
func (b *Backend) load() (store, error) {
	raw, err := os.ReadFile(b.dir("state.json"))
	if errors.Is(err, os.ErrNotExist) {
		s := store{Booted: "a", Next: "a", Good: true}
		if err := b.writeSlot("a", meta{Ref: InitialRef, Digest: DigestOf([]byte(InitialRef))}, []byte(InitialRef)); err != nil {
			return store{}, err
		}
		return s, b.save(s)
	}
	if err != nil {
		return store{}, fmt.Errorf("read simulated OS state: %w", err)
	}
	var s store
	if err := json.Unmarshal(raw, &s); err != nil {
		return store{}, fmt.Errorf("decode simulated OS state: %w", err)
	}
	return s, nil
}

func (b *Backend) save(s store) error {
	raw, _ := json.Marshal(s)
	return atomicfile.Write(b.dir("state.json"), raw, 0o644)
}

func (b *Backend) slotMeta(slot string) (meta, error) {
	raw, err := os.ReadFile(b.dir("slots", slot, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return meta{}, nil
	}
	if err != nil {
		return meta{}, fmt.Errorf("read slot %s: %w", slot, err)
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return meta{}, fmt.Errorf("decode slot %s: %w", slot, err)
	}
	return m, nil
}

func (b *Backend) writeSlot(slot string, m meta, image []byte) error {
	if err := atomicfile.Write(b.dir("slots", slot, "image"), image, 0o644); err != nil {
		return err
	}
	raw, _ := json.Marshal(m)
	return atomicfile.Write(b.dir("slots", slot, "meta.json"), raw, 0o644)
}

// content reads an artifact's bytes.
func (b *Backend) content(a backend.Artifact) ([]byte, error) {
	if strings.HasPrefix(a.Ref, "sim:") {
		return []byte(a.Ref), nil
	}
	for _, p := range []string{filepath.Join(b.hostRoot, a.Ref), a.Ref} {
		data, err := os.ReadFile(p)
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("read artifact %s: %w", p, err)
		}
	}
	return nil, fmt.Errorf("%w: artifact %q not found", backend.ErrArtifactRefused, a.Ref)
}

// Stage implements backend.Backend: verify the digest, then write the image into
// the slot that is not booted.
func (b *Backend) Stage(_ context.Context, a backend.Artifact) error {
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	s, err := b.load()
	if err != nil {
		return err
	}
	data, err := b.content(a)
	if err != nil {
		return err
	}
	if got := DigestOf(data); got != a.Digest {
		return fmt.Errorf("%w: %s has digest %s, the plan wants %s", backend.ErrArtifactRefused, a.Ref, got, a.Digest)
	}
	if m, err := b.slotMeta(s.Booted); err != nil {
		return err
	} else if m.Digest == a.Digest {
		return nil // already running it
	}
	target := other(s.Booted)
	if m, err := b.slotMeta(target); err != nil {
		return err
	} else if m.Digest == a.Digest {
		return nil
	}
	return b.writeSlot(target, meta{Ref: a.Ref, Digest: a.Digest}, data)
}

// Activate implements backend.Backend: the staged slot boots next, the booted one
// becomes the fallback.
func (b *Backend) Activate(_ context.Context, a backend.Artifact) error {
	s, err := b.load()
	if err != nil {
		return err
	}
	if m, err := b.slotMeta(s.Booted); err != nil {
		return err
	} else if m.Digest == a.Digest {
		return nil
	}
	target := other(s.Booted)
	m, err := b.slotMeta(target)
	if err != nil {
		return err
	}
	if m.Digest != a.Digest {
		return fmt.Errorf("activate %s: the image is not staged", a.Ref)
	}
	s.Next, s.Fallback, s.Good = target, s.Booted, false
	return b.save(s)
}

// Verify implements backend.Backend.
func (b *Backend) Verify(_ context.Context, a backend.Artifact) error {
	s, err := b.load()
	if err != nil {
		return err
	}
	m, err := b.slotMeta(s.Booted)
	if err != nil {
		return err
	}
	if m.Digest != a.Digest {
		return fmt.Errorf("%w: slot %s runs %s (%s), want %s", backend.ErrVerifyFailed, s.Booted, m.Ref, m.Digest, a.Digest)
	}
	return nil
}

// Commit implements backend.Backend: mark good, forget the fallback.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	if err := b.Verify(ctx, a); err != nil {
		return err
	}
	s, err := b.load()
	if err != nil {
		return err
	}
	s.Good, s.Fallback = true, ""
	return b.save(s)
}

// Rollback implements backend.Backend: the fallback slot boots next. The node runs
// it after the reboot the agent performs when it had rebooted into the new image.
func (b *Backend) Rollback(context.Context, backend.Artifact) error {
	s, err := b.load()
	if err != nil {
		return err
	}
	if s.Fallback == "" {
		return nil // never activated: nothing boots differently
	}
	s.Next, s.Good = s.Fallback, true
	if s.Booted == s.Fallback {
		s.Fallback = ""
	}
	return b.save(s)
}

// Status implements backend.Backend.
func (b *Backend) Status(context.Context) (backend.Status, error) {
	s, err := b.load()
	if err != nil {
		return backend.Status{}, err
	}
	digest := func(slot string) string {
		if slot == "" {
			return ""
		}
		m, _ := b.slotMeta(slot)
		return m.Digest
	}
	st := backend.Status{Booted: digest(s.Booted), Rollback: digest(s.Fallback)}
	if s.Next != s.Booted {
		st.Staged = digest(s.Next)
	}
	return st, nil
}

// Boot switches the booted slot to the next one: what the simulated host does on
// reboot. A fresh store is initialised first.
func (b *Backend) Boot() error {
	s, err := b.load()
	if err != nil {
		return err
	}
	if s.Booted == s.Next {
		return nil
	}
	s.Booted = s.Next
	if s.Fallback == s.Booted {
		s.Fallback = ""
	}
	return b.save(s)
}

// FallBack boots the fallback slot instead of the next one: what a bootloader
// with boot counting does when the slot under trial does not come up (or the
// node loses power during the trial, before Commit). The slot that failed stays
// the next boot until Rollback or a new Activate: the bootloader records the
// failed trial, not a new choice. Without a fallback it boots as Boot does.
func (b *Backend) FallBack() error {
	s, err := b.load()
	if err != nil {
		return err
	}
	if s.Fallback == "" {
		return b.Boot()
	}
	s.Booted = s.Fallback
	return b.save(s)
}
