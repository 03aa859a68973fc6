package rauc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans and configuration.
const Name = protocol.BackendRAUC

// DefaultConf is where RAUC reads its system configuration by default.
const DefaultConf = "/etc/rauc/system.conf"

// Options configure the rauc backend.
type Options struct {
	// Runner runs rauc; required. Its environment must reach RAUC's D-Bus service.
	Runner backend.Runner
	// RAUCPath defaults to "rauc".
	RAUCPath string
	// Conf is the system.conf passed with --conf; empty means RAUC's default.
	Conf string
	// Keyring overrides the keyring of system.conf (--keyring); optional.
	Keyring string
	// StateDir keeps the image checksums of staged bundles across reboots; required.
	StateDir string
	// HostRoot is where the host's root is mounted in the agent's view ("" or
	// "/" when the agent runs on the host). Bundle and Conf are host paths:
	// RAUC reads them on the host, this backend reads them under HostRoot.
	HostRoot string
}

// Backend drives RAUC.
type Backend struct {
	o Options
	// activateInstalled mirrors system.conf: when true, `rauc install` also
	// switches the next boot, so installing cannot be a Stage.
	activateInstalled bool
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options, reads system.conf (for activate-installed) and
// returns a backend. An unreadable system.conf is read as RAUC's default.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("rauc backend: runner is required")
	}
	if o.StateDir == "" || !filepath.IsAbs(o.StateDir) {
		return nil, fmt.Errorf("rauc backend: state dir %q must be absolute", o.StateDir)
	}
	if o.RAUCPath == "" {
		o.RAUCPath = "rauc"
	}
	conf := o.Conf
	if conf == "" {
		conf = DefaultConf
	}
	b := &Backend{o: o, activateInstalled: true}
	if data, err := os.ReadFile(filepath.Join(o.HostRoot, conf)); err == nil {
		b.activateInstalled = activateInstalled(string(data))
	}
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		CanStage:         !b.activateInstalled,
		NeedsReboot:      true,
		SupportsRollback: true,
		HasMarkGood:      true,
		VerifiesDigest:   true,
	}
}

func (b *Backend) rauc(ctx context.Context, args ...string) (backend.Result, error) {
	var global []string
	if b.o.Conf != "" {
		global = append(global, "--conf="+b.o.Conf)
	}
	if b.o.Keyring != "" {
		global = append(global, "--keyring="+b.o.Keyring)
	}
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.RAUCPath, Args: append(global, args...)})
}

func (b *Backend) status(ctx context.Context) (SystemStatus, error) {
	res, err := b.rauc(ctx, "status", "--detailed", "--output-format=json")
	if err != nil {
		return SystemStatus{}, fmt.Errorf("rauc status: %w", err)
	}
	return parseStatus(res.Stdout)
}

func (b *Backend) statePath(hex string) string {
	return filepath.Join(b.o.StateDir, "rauc-"+hex+".json")
}

// verify checks the bundle file and its signature, and remembers its images.
func (b *Backend) verify(ctx context.Context, a backend.Artifact) (Images, error) {
	hex, err := a.DigestHex()
	if err != nil {
		return nil, err
	}
	if !filepath.IsAbs(a.Ref) {
		return nil, fmt.Errorf("%w: %q is not an absolute path on the node", backend.ErrArtifactRefused, a.Ref)
	}
	if err := backend.VerifyFile(filepath.Join(b.o.HostRoot, a.Ref), a); err != nil {
		return nil, err
	}
	res, err := b.rauc(ctx, "info", "--output-format=json", a.Ref)
	if err != nil {
		return nil, fmt.Errorf("%w: rauc info: %w", backend.ErrArtifactRefused, err)
	}
	imgs, err := parseInfo(res.Stdout)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", backend.ErrArtifactRefused, err)
	}
	data, err := json.Marshal(imgs)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(b.statePath(hex), data, 0o600); err != nil {
		return nil, fmt.Errorf("remember bundle images: %w", err)
	}
	return imgs, nil
}

// images returns the remembered images of an artifact, verifying the bundle
// again if they were not remembered (a lost state dir).
func (b *Backend) images(ctx context.Context, a backend.Artifact) (Images, error) {
	hex, err := a.DigestHex()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(b.statePath(hex))
	if errors.Is(err, os.ErrNotExist) {
		return b.verify(ctx, a)
	}
	if err != nil {
		return nil, fmt.Errorf("read bundle images: %w", err)
	}
	var imgs Images
	if err := json.Unmarshal(data, &imgs); err != nil {
		return nil, fmt.Errorf("read bundle images: %w", err)
	}
	return imgs, nil
}

// Stage implements backend.Backend.
func (b *Backend) Stage(ctx context.Context, a backend.Artifact) error {
	imgs, err := b.verify(ctx, a)
	if err != nil {
		return fmt.Errorf("stage %s: %w", a.Ref, err)
	}
	if b.activateInstalled {
		// Installing would switch the next boot: leave it to Activate.
		return nil
	}
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	if booted, ok := st.booted(); ok && booted.holds(imgs) {
		return nil
	}
	if _, ok := st.holder(imgs); ok {
		return nil
	}
	if _, err := b.rauc(ctx, "install", a.Ref); err != nil {
		return fmt.Errorf("stage %s: %w", a.Ref, err)
	}
	return nil
}

// Activate implements backend.Backend.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	imgs, err := b.images(ctx, a)
	if err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	if booted, ok := st.booted(); ok && booted.holds(imgs) {
		return nil
	}
	target, ok := st.holder(imgs)
	if !ok {
		if !b.activateInstalled {
			return fmt.Errorf("activate %s: no slot holds the bundle: stage it first", a.Ref)
		}
		// The file is checked again: it may have changed since Stage.
		if _, err := b.verify(ctx, a); err != nil {
			return fmt.Errorf("activate %s: %w", a.Ref, err)
		}
		if _, err := b.rauc(ctx, "install", a.Ref); err != nil {
			return fmt.Errorf("activate %s: %w", a.Ref, err)
		}
		return nil
	}
	if st.BootPrimary == target.Name {
		return nil
	}
	if _, err := b.rauc(ctx, "status", "mark-active", target.Name); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	return nil
}

// bootedHolds checks that the running slot is the artifact.
func (b *Backend) bootedHolds(ctx context.Context, a backend.Artifact) (SystemStatus, Slot, error) {
	imgs, err := b.images(ctx, a)
	if err != nil {
		return SystemStatus{}, Slot{}, err
	}
	st, err := b.status(ctx)
	if err != nil {
		return SystemStatus{}, Slot{}, err
	}
	booted, ok := st.booted()
	if !ok {
		return st, Slot{}, fmt.Errorf("%w: rauc does not know the booted slot", backend.ErrVerifyFailed)
	}
	if !booted.holds(imgs) {
		// A slot RAUC never installed (the image the node was provisioned with)
		// has no checksum in RAUC's status.
		held := "an image RAUC did not install"
		if sum := booted.SlotStatus.Checksum.SHA256; sum != "" {
			held = "image " + sum
		}
		return st, booted, fmt.Errorf("%w: booted slot %s (%s) holds %s, not the bundle's", backend.ErrVerifyFailed, booted.Name, booted.BootName, held)
	}
	return st, booted, nil
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	_, _, err := b.bootedHolds(ctx, a)
	return err
}

// Commit implements backend.Backend: mark the booted slot good, which ends the
// bootloader's boot counting. A slot that is not the artifact is never marked good.
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	if _, _, err := b.bootedHolds(ctx, a); err != nil {
		return fmt.Errorf("commit %s: %w", a.Ref, err)
	}
	if _, err := b.rauc(ctx, "status", "mark-good", "booted"); err != nil {
		return fmt.Errorf("commit %s: %w", a.Ref, err)
	}
	return nil
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	imgs, err := b.images(ctx, a)
	if err != nil {
		return fmt.Errorf("rollback %s: %w", a.Ref, err)
	}
	st, err := b.status(ctx)
	if err != nil {
		return err
	}
	booted, ok := st.booted()
	if !ok {
		return fmt.Errorf("rollback %s: rauc does not know the booted slot", a.Ref)
	}
	// Before the reboot (or after falling back) the booted slot is the old image:
	// it must be primary again. After booting the artifact, the other slot must.
	want := booted
	if booted.holds(imgs) {
		prev, ok := st.previous()
		if !ok {
			return fmt.Errorf("rollback %s: no previous slot for %s", a.Ref, booted.Name)
		}
		want = prev
	}
	if st.BootPrimary != want.Name {
		if _, err := b.rauc(ctx, "status", "mark-active", want.Name); err != nil {
			return fmt.Errorf("rollback %s: %w", a.Ref, err)
		}
	}
	// The slot that holds the artifact failed its trial: marked bad, the
	// bootloader never tries it again until a new plan installs and activates a
	// slot. Marked whatever RAUC reports as its state: RAUC reads a slot whose
	// trial is still counted (GRUB's <slot>_TRY=1) as bad too, but that state is
	// only as good as the bootloader script's rule; <slot>_OK=0 is explicit.
	failed, ok := st.holder(imgs)
	if booted.holds(imgs) {
		failed, ok = booted, true
	}
	if ok && failed.Name != want.Name {
		if _, err := b.rauc(ctx, "status", "mark-bad", failed.Name); err != nil {
			return fmt.Errorf("rollback %s: %w", a.Ref, err)
		}
	}
	return nil
}

// Status implements backend.Backend; images are named "<slot>@sha256:<image checksum>".
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	st, err := b.status(ctx)
	if err != nil {
		return backend.Status{}, err
	}
	name := func(sl Slot) string {
		if sl.SlotStatus.Checksum.SHA256 == "" {
			return sl.Name
		}
		return sl.Name + "@sha256:" + sl.SlotStatus.Checksum.SHA256
	}
	var out backend.Status
	booted, ok := st.booted()
	if ok {
		out.Booted = name(booted)
	}
	for _, sl := range st.bootable() {
		if sl.Name == st.BootPrimary && sl.Name != booted.Name {
			out.Staged = name(sl)
		}
	}
	if prev, ok := st.previous(); ok && prev.Name != st.BootPrimary {
		out.Rollback = name(prev)
	}
	return out, nil
}
