package artifact

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Defaults of a Store.
const (
	DefaultMaxBytes = protocol.MaxArtifactBytes
	DefaultTimeout  = 30 * time.Minute
	// DefaultReserveBytes is the room a download leaves free on the host's disk:
	// the node goes on serving (and logging) while it stages.
	DefaultReserveBytes int64 = 256 << 20
	partialSuffix             = ".partial"
)

var (
	// ErrDigestMismatch: a source served content with another digest.
	ErrDigestMismatch = errors.New("content does not match its digest")
	// ErrUnreachable: no source answered with the artifact.
	ErrUnreachable = errors.New("no source served the artifact")
	// ErrTooLarge: the artifact is larger than Store.MaxBytes.
	ErrTooLarge = errors.New("artifact exceeds the size limit")
	// ErrSizeMismatch: a source announced or sent another length than the
	// artifact's declared size.
	ErrSizeMismatch = errors.New("content does not have the declared size")
	// ErrDiskFull: the host has no room for the artifact.
	ErrDiskFull = errors.New("no room on the host's disk for the artifact")
	// ErrWrongArchitecture: an executable is built for another architecture.
	ErrWrongArchitecture = errors.New("executable is for another architecture")
)

// Progress is told how many bytes of an artifact are fetched, and of how many
// (0: unknown).
type Progress func(fetched, size int64)

// Store is the host's content-addressed artifact store. The zero value (with Root)
// is ready to use.
type Store struct {
	// Root is the host's root in the agent's view.
	Root string
	// Dir is the store's directory (protocol.ArtifactDir) as the agent opens it,
	// resolved inside the host root and pinned (kube.Host.PinDir); empty: the
	// path under Root.
	Dir string
	// Client fetches http(s) URLs and talks to registries; nil means a client with
	// the system's trust roots, the proxy from the environment and Timeout. A
	// source host's CA bundle replaces its transport's roots, and every fetch
	// follows redirects by the store's rule (redirect.go), whatever its
	// CheckRedirect.
	Client *http.Client
	// Timeout bounds one fetch when Client is nil; 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxBytes bounds one artifact; 0 means DefaultMaxBytes.
	MaxBytes int64
	// ReserveBytes is the free space a download must leave; 0 means
	// DefaultReserveBytes, negative means none.
	ReserveBytes int64
	// Arch is the node's GOARCH for the executable check; "" means runtime.GOARCH.
	Arch string
}

func (s *Store) dir() string {
	if s.Dir != "" {
		return filepath.Join(s.Dir, "sha256")
	}
	return filepath.Join(s.Root, protocol.ArtifactDir, "sha256")
}

// Path is the agent's path of the staged file with the digest.
func (s *Store) Path(digest string) (string, error) {
	h, err := protocol.DigestHex(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.dir(), h), nil
}

func (s *Store) client() *http.Client {
	if s.Client != nil {
		return s.Client
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t, Timeout: timeout}
}

func (s *Store) maxBytes() int64 {
	if s.MaxBytes > 0 {
		return s.MaxBytes
	}
	return DefaultMaxBytes
}

func (s *Store) reserve() int64 {
	switch {
	case s.ReserveBytes < 0:
		return 0
	case s.ReserveBytes == 0:
		return DefaultReserveBytes
	}
	return s.ReserveBytes
}

func (s *Store) arch() string { return s.ArchName() }

// ArchName is the node's GOARCH the store checks executables against.
func (s *Store) ArchName() string {
	if s.Arch != "" {
		return s.Arch
	}
	return runtime.GOARCH
}

// Has reports whether the store holds the verified file of the digest.
func (s *Store) Has(digest string) bool {
	p, err := s.Path(digest)
	if err != nil {
		return false
	}
	got, err := FileDigest(p)
	return err == nil && got == digest
}

// Fetch makes sure the store holds item's file, verified; executables are checked
// against the node's architecture. It returns the agent's path of the file.
func (s *Store) Fetch(ctx context.Context, item protocol.StageItem, progress Progress) (string, error) {
	a := item.Artifact
	if err := a.Validate(); err != nil {
		return "", fmt.Errorf("%s: %w", item.Name, err)
	}
	dest, _ := s.Path(a.Digest)
	if s.Has(a.Digest) {
		if err := s.checkArch(item, dest); err != nil {
			return "", err
		}
		return dest, s.markExecutable(item, dest)
	}
	if err := os.MkdirAll(s.dir(), 0o700); err != nil {
		return "", s.diskErr(item, fmt.Errorf("create %s: %w", protocol.ArtifactDir, err))
	}
	var errs []error
	for _, src := range a.Sources() {
		err := s.fetchFrom(ctx, item, src, dest, progress)
		if err == nil {
			if err := s.checkArch(item, dest); err != nil {
				_ = os.Remove(dest)
				return "", err
			}
			return dest, s.markExecutable(item, dest)
		}
		if ctx.Err() != nil || errors.Is(err, ErrDiskFull) || errors.Is(err, ErrTooLarge) {
			return "", err
		}
		errs = append(errs, err)
	}
	// Every source failed: a mismatch anywhere says the source is wrong, which is
	// the more useful answer than "unreachable".
	joined := errors.Join(errs...)
	if errors.Is(joined, ErrDigestMismatch) || errors.Is(joined, ErrSizeMismatch) {
		return "", joined
	}
	return "", fmt.Errorf("%s: %w: %w", item.Name, ErrUnreachable, joined)
}

// fetchFrom downloads one source into a partial file and renames it to dest when
// its length and digest match.
func (s *Store) fetchFrom(ctx context.Context, item protocol.StageItem, src, dest string, progress Progress) error {
	wantHex, _ := protocol.DigestHex(item.Artifact.Digest)
	body, announced, err := s.open(ctx, src, item)
	if err != nil {
		return fmt.Errorf("%s from %s: %w", item.Name, redactURL(src), err)
	}
	defer body.Close()
	declared := item.Artifact.Size
	limit := s.maxBytes()
	switch {
	case declared > limit:
		return fmt.Errorf("%s: %w: the plan declares %d bytes, more than %d", item.Name, ErrTooLarge, declared, limit)
	case declared > 0 && announced > 0 && announced != declared:
		return fmt.Errorf("%s: %w: %s announces %d bytes, the plan declares %d", item.Name, ErrSizeMismatch, redactURL(src), announced, declared)
	case announced > limit:
		return fmt.Errorf("%s: %w: %s announces %d bytes, more than %d", item.Name, ErrTooLarge, redactURL(src), announced, limit)
	}
	size := announced
	if declared > 0 {
		size = declared
	}
	if err := s.checkRoom(size); err != nil {
		return fmt.Errorf("%s: %w", item.Name, err)
	}
	removePartials(s.dir(), wantHex)
	tmp, err := os.CreateTemp(s.dir(), "."+wantHex+".*"+partialSuffix)
	if err != nil {
		return s.diskErr(item, fmt.Errorf("create partial file: %w", err))
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if size > 0 {
		// More than declared or announced is refused as it arrives, not after the
		// disk took it: one byte past it ends the read.
		limit = size
	}
	h := sha256.New()
	room := &roomGuard{w: tmp, dir: s.dir(), reserve: s.reserve()}
	w := &counter{w: io.MultiWriter(room, h), size: size, progress: progress}
	n, err := io.Copy(w, io.LimitReader(body, limit+1))
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrDiskFull) {
			return s.diskErr(item, err)
		}
		if errors.Is(err, errDigest) {
			return fmt.Errorf("%s: %w: %s served other content than %s", item.Name, ErrDigestMismatch, redactURL(src), item.Artifact.Digest)
		}
		return fmt.Errorf("%s: read %s: %w", item.Name, redactURL(src), err)
	}
	switch {
	case n > limit && declared > 0:
		return fmt.Errorf("%s: %w: %s sent more than the %d bytes the plan declares", item.Name, ErrSizeMismatch, redactURL(src), declared)
	case n > limit && size > 0:
		return fmt.Errorf("%s: %w: %s sent more than the %d bytes it announced", item.Name, ErrTooLarge, redactURL(src), size)
	case n > limit:
		return fmt.Errorf("%s: %w: %s is more than %d bytes", item.Name, ErrTooLarge, redactURL(src), limit)
	case declared > 0 && n < declared:
		// The body ended cleanly (a cut connection is a read error above): the
		// source serves a shorter file than the plan's.
		return fmt.Errorf("%s: %w: %s sent %d bytes, the plan declares %d", item.Name, ErrSizeMismatch, redactURL(src), n, declared)
	}
	if got := protocol.DigestFromSum(h.Sum(nil)); got != item.Artifact.Digest {
		return fmt.Errorf("%s: %w: %s served content with digest %s, the plan requires %s", item.Name, ErrDigestMismatch, redactURL(src), got, item.Artifact.Digest)
	}
	if err := tmp.Sync(); err != nil {
		return s.diskErr(item, fmt.Errorf("fsync: %w", err))
	}
	if err := tmp.Close(); err != nil {
		return s.diskErr(item, fmt.Errorf("close: %w", err))
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("%s: store: %w", item.Name, err)
	}
	ok = true
	return atomicfile.SyncDir(s.dir())
}

// open returns the body of one source and its announced size (0: unknown),
// fetched with the settings of the source's host.
func (s *Store) open(ctx context.Context, src string, item protocol.StageItem) (io.ReadCloser, int64, error) {
	u, err := url.Parse(src)
	if err != nil {
		return nil, 0, err
	}
	host := item.Artifact.SourceHostOf(src)
	client, err := s.clientFor(u, host)
	if err != nil {
		return nil, 0, err
	}
	if u.Scheme == protocol.SchemeOCI || u.Scheme == protocol.SchemeOCIHTTP {
		return s.openOCI(ctx, u, item.Artifact.Digest, item.Credentials, client.Transport)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		// A refused redirect is said without the target's query (a signed URL's
		// token), which the client's error would quote.
		if errors.Is(err, ErrRedirectRefused) {
			return nil, 0, errors.Unwrap(err)
		}
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("GET: %s", resp.Status)
	}
	return resp.Body, max(resp.ContentLength, 0), nil
}

// checkRoom refuses a download of size bytes that would leave less than the
// reserve free.
func (s *Store) checkRoom(size int64) error {
	free, ok := freeBytes(s.dir())
	if !ok {
		return nil // no answer: the write finds out
	}
	if size+s.reserve() > free {
		return fmt.Errorf("%w: %d bytes to fetch, %d free on the disk of %s (keeping %d free)", ErrDiskFull, size, free, protocol.ArtifactDir, s.reserve())
	}
	return nil
}

// freeBytes is the space an unprivileged write may still take on dir's file
// system; false when the file system does not say.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true //nolint:unconvert // field types differ per platform
}

// roomCheckStep is how much a download writes between two looks at the free space,
// at most: the reserve is kept while other writers share the disk, to within this.
const roomCheckStep = 4 << 20

// roomGuard writes to w only while dir's file system keeps reserve bytes free,
// whatever the source announced (a chunked body announces nothing): it looks at the
// free space before the first write and again each time it wrote what it last found
// room for, or roomCheckStep, and fails with ErrDiskFull before a write that would
// eat into the reserve.
type roomGuard struct {
	w       io.Writer
	dir     string
	reserve int64
	// allowed is what may be written before the next look.
	allowed int64
}

func (g *roomGuard) Write(p []byte) (int, error) {
	if int64(len(p)) > g.allowed {
		free, ok := freeBytes(g.dir)
		if !ok {
			g.allowed = max(roomCheckStep, int64(len(p))) // no answer: the write finds out
		} else {
			room := free - g.reserve
			if room < int64(len(p)) {
				return 0, fmt.Errorf("%w: %d free on the disk of %s, keeping %d free", ErrDiskFull, free, protocol.ArtifactDir, g.reserve)
			}
			g.allowed = min(room, max(roomCheckStep, int64(len(p))))
		}
	}
	n, err := g.w.Write(p)
	g.allowed -= int64(n)
	return n, err
}

func (s *Store) diskErr(item protocol.StageItem, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%s: %w: %w", item.Name, ErrDiskFull, err)
	}
	return fmt.Errorf("%s: %w", item.Name, err)
}

// elfMachines maps GOARCH to the ELF machine of its executables.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390,
}

// checkArch refuses an executable whose ELF header names another machine than the
// node's.
func (s *Store) checkArch(item protocol.StageItem, p string) error {
	if !item.Executable {
		return nil
	}
	want, known := elfMachines[s.arch()]
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("%s: %w: not an ELF executable: %w", item.Name, ErrWrongArchitecture, err)
	}
	defer f.Close()
	if known && f.Machine != want {
		return fmt.Errorf("%s: %w: it is built for %s, this node is %s", item.Name, ErrWrongArchitecture, f.Machine, s.arch())
	}
	return nil
}

// markExecutable makes a staged executable runnable from the store (root only:
// the store's directory is 0700): staging runs the new kubeadm from there to pull
// the control-plane images before the node is cordoned.
func (s *Store) markExecutable(item protocol.StageItem, p string) error {
	if !item.Executable {
		return nil
	}
	if err := os.Chmod(p, 0o755); err != nil {
		return fmt.Errorf("%s: %w", item.Name, err)
	}
	return nil
}

// Prune removes staged files other than keep's digests, and partial downloads:
// the store holds one plan's artifacts at a time.
func (s *Store) Prune(keep []string) error {
	entries, err := os.ReadDir(s.dir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", protocol.ArtifactDir, err)
	}
	kept := map[string]bool{}
	for _, d := range keep {
		if h, err := protocol.DigestHex(d); err == nil {
			kept[h] = true
		}
	}
	var errs []error
	for _, e := range entries {
		if !kept[e.Name()] {
			if err := os.Remove(filepath.Join(s.dir(), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func removePartials(dir, hex string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "."+hex+".*"+partialSuffix))
	for _, m := range matches {
		_ = os.Remove(m)
	}
}

// FileDigest returns the digest ("sha256:<hex>", protocol.DigestFromSum) of a
// regular file's content; a symlink is not followed (an error), so a path the
// agent checks is the file it will use, not one a link points to.
func FileDigest(p string) (string, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", p)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return protocol.DigestFromSum(h.Sum(nil)), nil
}

// counter reports progress at most every progressStep bytes.
type counter struct {
	w        io.Writer
	n, last  int64
	size     int64
	progress Progress
}

const progressStep = 4 << 20

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.progress != nil && (c.n-c.last >= progressStep || (c.size > 0 && c.n == c.size)) {
		c.last = c.n
		c.progress(c.n, c.size)
	}
	return n, err
}
