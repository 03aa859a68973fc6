package ostree

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Name is the backend's name in plans and configuration.
const Name = protocol.BackendOSTree

// StagingRef holds a staged commit in the sysroot repository until Commit or
// Rollback, so that a prune between Stage and Activate cannot remove it.
const StagingRef = "capi-inplace/staged"

// Flavor selects the CLI that drives the sysroot.
type Flavor string

const (
	// FlavorOSTree drives `ostree admin` directly; works on any OSTree sysroot.
	FlavorOSTree Flavor = "ostree"
	// FlavorRPMOSTree drives rpm-ostree, which owns the sysroot where it is
	// installed; only remote sources and the booted sysroot "/" are supported.
	FlavorRPMOSTree Flavor = "rpm-ostree"
)

// Options configure the ostree backend.
type Options struct {
	// Runner runs ostree/rpm-ostree; required.
	Runner backend.Runner
	// Sysroot is the OSTree sysroot; "/" on a booted host. Default "/".
	Sysroot string
	// OSName is the stateroot (`--os`); required for FlavorOSTree.
	OSName string
	// Flavor defaults to FlavorOSTree; see DetectFlavor.
	Flavor Flavor
	// OSTreePath and RPMOSTreePath default to "ostree" and "rpm-ostree".
	OSTreePath    string
	RPMOSTreePath string
	// DeployArgs are extra arguments for `ostree admin deploy` (e.g. --karg=...).
	DeployArgs []string
}

// Backend drives an OSTree sysroot.
type Backend struct {
	o Options
}

var _ backend.Backend = (*Backend)(nil)

// New validates the options and returns a backend.
func New(o Options) (*Backend, error) {
	if o.Runner == nil {
		return nil, errors.New("ostree backend: runner is required")
	}
	if o.Sysroot == "" {
		o.Sysroot = "/"
	}
	if !filepath.IsAbs(o.Sysroot) {
		return nil, fmt.Errorf("ostree backend: sysroot %q must be absolute", o.Sysroot)
	}
	if o.Flavor == "" {
		o.Flavor = FlavorOSTree
	}
	switch o.Flavor {
	case FlavorOSTree:
		if o.OSName == "" {
			return nil, errors.New("ostree backend: os name (stateroot) is required")
		}
	case FlavorRPMOSTree:
		if filepath.Clean(o.Sysroot) != "/" {
			return nil, fmt.Errorf("ostree backend: rpm-ostree only manages the booted sysroot, not %q", o.Sysroot)
		}
	default:
		return nil, fmt.Errorf("ostree backend: unknown flavor %q", o.Flavor)
	}
	if o.OSTreePath == "" {
		o.OSTreePath = "ostree"
	}
	if o.RPMOSTreePath == "" {
		o.RPMOSTreePath = "rpm-ostree"
	}
	return &Backend{o: o}, nil
}

// DetectFlavor returns FlavorRPMOSTree when rpm-ostree runs on the host, since
// it then owns the sysroot and plain `ostree admin` would race its daemon.
func DetectFlavor(ctx context.Context, r backend.Runner, rpmOSTreePath string) Flavor {
	if rpmOSTreePath == "" {
		rpmOSTreePath = "rpm-ostree"
	}
	if _, err := r.Run(ctx, backend.Command{Name: rpmOSTreePath, Args: []string{"--version"}}); err == nil {
		return FlavorRPMOSTree
	}
	return FlavorOSTree
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return Name }

// Capabilities implements backend.Backend. OSTree has no boot counting of its
// own (greenboot adds it), hence no mark-good.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{CanStage: true, NeedsReboot: true, SupportsRollback: true, VerifiesDigest: true}
}

// source is a parsed artifact reference.
type source struct {
	// repo is an absolute path of a local repository, or "".
	repo string
	// remote is the remote name when repo is "".
	remote string
	ref    string
}

func parseRef(ref string) (source, error) {
	src, name, ok := strings.Cut(ref, ":")
	if !ok || src == "" || name == "" {
		return source{}, fmt.Errorf("%w: ostree ref %q is not <remote-or-/repo/path>:<ref>", backend.ErrArtifactRefused, ref)
	}
	if strings.HasPrefix(src, "/") {
		return source{repo: filepath.Clean(src), ref: name}, nil
	}
	return source{remote: src, ref: name}, nil
}

func (b *Backend) repo() string { return filepath.Join(b.o.Sysroot, "ostree", "repo") }

func (b *Backend) ostree(ctx context.Context, args ...string) (backend.Result, error) {
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.OSTreePath, Args: args})
}

func (b *Backend) rpmOSTree(ctx context.Context, args ...string) (backend.Result, error) {
	return b.o.Runner.Run(ctx, backend.Command{Name: b.o.RPMOSTreePath, Args: args})
}

// refusal reports whether a pull failed because of the artifact itself (the
// commit does not exist or its objects do not match their checksums) rather than
// because of the network or the host. An HTTP remote answers a commit it does
// not have with 404 (the same answer a wrong remote URL gets: neither passes on
// a retry). A remote the sysroot repository does not have (ostree: `Remote "<name>"
// not found`) is the host's configuration, not the artifact: the node's
// bootstrap may add it, or add it again when a power cut lost its file, and
// staging again then passes.
func refusal(err error) bool {
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return false
	}
	msg := string(ce.Result.Stderr)
	if strings.Contains(msg, "Remote \"") && strings.Contains(msg, "\" not found") {
		return false
	}
	for _, s := range []string{"Corrupted", "checksum", "No such metadata object", "not found", "Server returned HTTP 404"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Stage implements backend.Backend: pull the commit, verified, and hold it.
func (b *Backend) Stage(ctx context.Context, a backend.Artifact) error {
	hex, err := a.DigestHex()
	if err != nil {
		return err
	}
	src, err := parseRef(a.Ref)
	if err != nil {
		return err
	}
	if b.o.Flavor == FlavorRPMOSTree {
		if src.repo != "" {
			return fmt.Errorf("%w: rpm-ostree pulls from remotes only, not from %s", backend.ErrArtifactRefused, src.repo)
		}
		if _, err := b.rpmOSTree(ctx, "rebase", "--download-only", src.remote+":"+src.ref, hex); err != nil {
			if refusal(err) {
				return fmt.Errorf("stage %s: %w: %w", a.Ref, backend.ErrArtifactRefused, err)
			}
			return fmt.Errorf("stage %s: %w", a.Ref, err)
		}
		return nil
	}
	if src.repo != "" {
		// The commit must exist in the source before anything is imported.
		if _, err := b.ostree(ctx, "--repo="+src.repo, "show", hex); err != nil {
			return fmt.Errorf("stage %s: %w: commit %s is not in %s: %w", a.Ref, backend.ErrArtifactRefused, hex, src.repo, err)
		}
		// --untrusted re-checksums every object instead of hard-linking it.
		_, err = b.ostree(ctx, "--repo="+b.repo(), "pull-local", "--untrusted", src.repo, hex)
	} else {
		// ref@checksum pins the pull to the digest; the objects are verified as fetched.
		_, err = b.ostree(ctx, "--repo="+b.repo(), "pull", src.remote, src.ref+"@"+hex)
	}
	if err != nil {
		if refusal(err) {
			return fmt.Errorf("stage %s: %w: %w", a.Ref, backend.ErrArtifactRefused, err)
		}
		return fmt.Errorf("stage %s: pull: %w", a.Ref, err)
	}
	if _, err := b.ostree(ctx, "--repo="+b.repo(), "refs", "--force", "--create="+StagingRef, hex); err != nil {
		return fmt.Errorf("stage %s: hold commit: %w", a.Ref, err)
	}
	return nil
}

func (b *Backend) deployments(ctx context.Context) ([]Deployment, error) {
	if b.o.Flavor == FlavorRPMOSTree {
		res, err := b.rpmOSTree(ctx, "status", "--json")
		if err != nil {
			return nil, fmt.Errorf("rpm-ostree status: %w", err)
		}
		return parseRPMOSTreeStatus(res.Stdout)
	}
	res, err := b.ostree(ctx, "admin", "status", "--sysroot="+b.o.Sysroot)
	if err != nil {
		return nil, fmt.Errorf("ostree admin status: %w", err)
	}
	ds, err := parseAdminStatus(string(res.Stdout))
	if err != nil {
		return nil, fmt.Errorf("parse ostree admin status: %w", err)
	}
	return ds, nil
}

// Activate implements backend.Backend: deploy the commit as the default.
func (b *Backend) Activate(ctx context.Context, a backend.Artifact) error {
	hex, err := a.DigestHex()
	if err != nil {
		return err
	}
	ds, err := b.deployments(ctx)
	if err != nil {
		return err
	}
	if checksumOf(summarize(ds).def) == hex {
		return nil
	}
	if b.o.Flavor == FlavorRPMOSTree {
		src, err := parseRef(a.Ref)
		if err != nil {
			return err
		}
		if _, err := b.rpmOSTree(ctx, "rebase", src.remote+":"+src.ref, hex); err != nil {
			return fmt.Errorf("activate %s: %w", a.Ref, err)
		}
		return nil
	}
	args := append([]string{"admin", "deploy", "--sysroot=" + b.o.Sysroot, "--os=" + b.o.OSName}, b.o.DeployArgs...)
	if _, err := b.ostree(ctx, append(args, hex)...); err != nil {
		return fmt.Errorf("activate %s: %w", a.Ref, err)
	}
	return nil
}

// Verify implements backend.Backend.
func (b *Backend) Verify(ctx context.Context, a backend.Artifact) error {
	hex, err := a.DigestHex()
	if err != nil {
		return err
	}
	ds, err := b.deployments(ctx)
	if err != nil {
		return err
	}
	s := summarize(ds)
	if s.booted == nil {
		return fmt.Errorf("%w: no booted deployment in %s", backend.ErrVerifyFailed, b.o.Sysroot)
	}
	if s.booted.Checksum != hex {
		return fmt.Errorf("%w: booted commit is %s, want %s", backend.ErrVerifyFailed, s.booted.Checksum, hex)
	}
	return nil
}

// Commit implements backend.Backend: the deployment is kept; only the staging
// hold is dropped (the rollback deployment stays, as it should).
func (b *Backend) Commit(ctx context.Context, a backend.Artifact) error {
	if _, err := a.DigestHex(); err != nil {
		return err
	}
	return b.release(ctx)
}

func (b *Backend) release(ctx context.Context) error {
	if b.o.Flavor == FlavorRPMOSTree {
		return nil
	}
	// Deleting a missing ref succeeds, which keeps this idempotent.
	if _, err := b.ostree(ctx, "--repo="+b.repo(), "refs", "--delete", StagingRef); err != nil {
		return fmt.Errorf("release staged commit: %w", err)
	}
	return nil
}

// rollbackAction is what Rollback must do, decided from the deployment list.
type rollbackAction int

const (
	// rollbackNone: the artifact is not what boots next; nothing to undo.
	rollbackNone rollbackAction = iota
	// rollbackDropPending: the artifact is deployed as default but not booted.
	rollbackDropPending
	// rollbackToPrevious: the artifact is booted; make the previous one default.
	rollbackToPrevious
)

func decideRollback(s summary, hex string) (rollbackAction, error) {
	if checksumOf(s.def) != hex {
		return rollbackNone, nil
	}
	if s.booted == nil || s.booted.Checksum != hex || s.bootedIdx != 0 {
		return rollbackDropPending, nil
	}
	if s.previous == nil {
		return rollbackNone, fmt.Errorf("booted commit %s has no previous deployment to roll back to", hex)
	}
	return rollbackToPrevious, nil
}

// Rollback implements backend.Backend.
func (b *Backend) Rollback(ctx context.Context, a backend.Artifact) error {
	hex, err := a.DigestHex()
	if err != nil {
		return err
	}
	ds, err := b.deployments(ctx)
	if err != nil {
		return err
	}
	s := summarize(ds)
	act, err := decideRollback(s, hex)
	if err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	switch {
	case act == rollbackDropPending && b.o.Flavor == FlavorRPMOSTree:
		_, err = b.rpmOSTree(ctx, "cleanup", "--pending")
	case act == rollbackDropPending:
		_, err = b.ostree(ctx, "admin", "undeploy", "--sysroot="+b.o.Sysroot, "0")
	case act == rollbackToPrevious && b.o.Flavor == FlavorRPMOSTree:
		_, err = b.rpmOSTree(ctx, "rollback")
	case act == rollbackToPrevious:
		// ostree admin has no reorder command before 2023.x: deploying the
		// previous commit again makes it the default and keeps this one as rollback.
		args := append([]string{"admin", "deploy", "--sysroot=" + b.o.Sysroot, "--os=" + s.previous.OS, "--retain"}, b.o.DeployArgs...)
		_, err = b.ostree(ctx, append(args, s.previous.Checksum)...)
	}
	if err != nil {
		return fmt.Errorf("rollback %s: %w", a.Ref, err)
	}
	return b.release(ctx)
}

// Status implements backend.Backend; the identifiers are commit checksums.
func (b *Backend) Status(ctx context.Context) (backend.Status, error) {
	ds, err := b.deployments(ctx)
	if err != nil {
		return backend.Status{}, err
	}
	s := summarize(ds)
	st := backend.Status{Booted: checksumOf(s.booted), Rollback: checksumOf(s.previous)}
	if d := checksumOf(s.def); d != st.Booted {
		st.Staged = d
	}
	return st, nil
}
