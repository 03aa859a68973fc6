package kube

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Every host file the agent reads or writes is resolved inside the host root:
// a symlink on the way (absolute or relative, e.g. Debian's /var/run -> /run)
// resolves as it would on the host, never into the agent's container, and never
// out of the root. Only symlinks that root (or the agent's own user) could have
// made are followed: one in a directory another user owns (a user's home, which
// they can point anywhere between two of the agent's writes) is refused with
// ErrSymlinkRefused, on every path: forward writes, backups, rollback and the
// agent's own state. The final component is never followed: a write replaces it
// (rename), a read or removal acts on the entry itself, and owners are set on the
// opened file (fchown), never by path.

// ErrSymlinkRefused is wrapped when a directory that must be a real directory
// (a user's ~/.ssh, written as root and given to the user) is a symlink.
var ErrSymlinkRefused = errors.New("symlink refused")

// openRoot opens the host root as an O_PATH handle.
func (h *Host) openRoot() (*os.File, error) {
	root := h.Root
	if root == "" {
		root = "/"
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open host root %s: %w", root, err)
	}
	return os.NewFile(uintptr(fd), root), nil
}

// openDir returns a handle to the host directory dir resolved inside the root
// (ResolveDir), creating missing directories (0755) when create is set.
func (h *Host) openDir(dir string, create bool) (*os.File, error) {
	root, err := h.openRoot()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	d, err := ResolveDir(root, dir, create)
	if err != nil {
		return nil, fmt.Errorf("resolve %s inside the host root: %w", dir, err)
	}
	return d, nil
}

// maxSymlinks bounds the symlinks one resolution follows, as the kernel's 40.
const maxSymlinks = 40

// ResolveDir returns an O_PATH handle to the directory dir inside root (an
// O_PATH handle of the host root), one component at a time with O_NOFOLLOW: a
// symlink is followed (its target taken inside the root, an absolute one from
// the root) only when the directory holding it is owned by root or by the
// agent's own user, who alone could have made it; in a directory anyone else
// owns it is refused (ErrSymlinkRefused). A missing directory is
// os.ErrNotExist, or created 0755 when create is set. Every step holds the
// directory it came from open, so a rename on the way cannot send it elsewhere.
func ResolveDir(root *os.File, dir string, create bool) (*os.File, error) {
	rest := path.Clean("/" + dir)
	for hops := 0; ; hops++ {
		if hops > maxSymlinks {
			return nil, fmt.Errorf("resolve %s: %w", dir, unix.ELOOP)
		}
		d, link, err := walkDir(root, rest, create)
		if err != nil || link == "" {
			return d, err
		}
		rest = link
	}
}

// walkDir walks the clean absolute path p from root. It returns the directory's
// handle, or, at a symlink it may follow, the path to walk instead ("" link
// means done).
func walkDir(root *os.File, p string, create bool) (*os.File, string, error) {
	fd, err := unix.Openat(int(root.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open host root: %w", err)
	}
	cur := os.NewFile(uintptr(fd), "/")
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = cur.Close()
		return nil, "", fmt.Errorf("stat host root: %w", err)
	}
	owner := st.Uid
	done := "/"
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, c := range comps {
		if c == "" {
			continue
		}
		next := path.Join(done, c)
		fd, err := unix.Openat(int(cur.Fd()), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(int(cur.Fd()), c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				_ = cur.Close()
				return nil, "", &os.PathError{Op: "mkdir", Path: next, Err: err}
			}
			fd, err = unix.Openat(int(cur.Fd()), c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			_ = cur.Close()
			return nil, "", &os.PathError{Op: "open", Path: next, Err: err}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			_ = cur.Close()
			return nil, "", &os.PathError{Op: "stat", Path: next, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			_ = cur.Close()
			cur, owner, done = os.NewFile(uintptr(fd), next), st.Uid, next
		case unix.S_IFLNK:
			_ = unix.Close(fd)
			if !trustedOwner(owner) {
				_ = cur.Close()
				return nil, "", fmt.Errorf("%w: %s is a symlink in %s, a directory of user %d", ErrSymlinkRefused, next, done, owner)
			}
			target, err := readlinkAt(cur, c)
			_ = cur.Close()
			if err != nil {
				return nil, "", &os.PathError{Op: "readlink", Path: next, Err: err}
			}
			if !path.IsAbs(target) {
				target = path.Join(done, target)
			}
			return nil, path.Clean("/" + path.Join(append([]string{target}, comps[i+1:]...)...)), nil
		default:
			_ = unix.Close(fd)
			_ = cur.Close()
			return nil, "", &os.PathError{Op: "open", Path: next, Err: unix.ENOTDIR}
		}
	}
	return cur, "", nil
}

// trustedOwner reports whether a directory's owner is root or the agent's own
// user: nobody else can have put a symlink in it.
func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// readlinkAt reads the symlink name in dir.
func readlinkAt(dir *os.File, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// splitHostPath returns a host path's directory and final name.
func splitHostPath(p string) (string, string, error) {
	p = path.Clean("/" + p)
	dir, name := path.Split(p)
	if name == "" || name == "." || name == ".." {
		return "", "", fmt.Errorf("%s is not a file path", p)
	}
	return dir, name, nil
}

// hostFile is what readHostFile found.
type hostFile struct {
	Data     []byte
	Mode     os.FileMode // permission bits
	UID, GID int
}

// readHostFile reads a regular host file without following a symlink at its
// final component. A missing file (or directory on the way) is os.ErrNotExist.
func (h *Host) readHostFile(p string) (*hostFile, error) {
	f, st, err := h.openHostFile(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return &hostFile{Data: data, Mode: os.FileMode(st.Mode).Perm(), UID: int(st.Uid), GID: int(st.Gid)}, nil
}

// hostFilesEqual reports whether the host file p is a regular file with the
// content of the host file saved and the given mode and owner, streaming both.
func (h *Host) hostFilesEqual(p, saved string, mode os.FileMode, uid, gid int) bool {
	f, st, err := h.openHostFile(p)
	if err != nil {
		return false
	}
	defer f.Close()
	s, sst, err := h.openHostFile(saved)
	if err != nil {
		return false
	}
	defer s.Close()
	if st.Size != sst.Size || os.FileMode(st.Mode).Perm() != mode || int(st.Uid) != uid || int(st.Gid) != gid {
		return false
	}
	a, b := make([]byte, 256<<10), make([]byte, 256<<10)
	for {
		n, errA := io.ReadFull(f, a)
		m, errB := io.ReadFull(s, b)
		if n != m || !bytes.Equal(a[:n], b[:m]) {
			return false
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case endA && endB:
			return true
		case endA != endB, errA != nil && !endA, errB != nil && !endB:
			return false
		}
	}
}

// openHostFile opens a regular host file for reading without following a symlink
// at its final component.
func (h *Host) openHostFile(p string) (*os.File, *unix.Stat_t, error) {
	dir, name, err := splitHostPath(p)
	if err != nil {
		return nil, nil, err
	}
	d, err := h.openDir(dir, false)
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, nil, fmt.Errorf("read %s: %w: the file is a symlink", p, ErrSymlinkRefused)
		}
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		_ = f.Close()
		return nil, nil, fmt.Errorf("read %s: not a regular file", p)
	}
	return f, &st, nil
}

// ReadFile reads a regular host file the way every host file is read: its
// directory resolved inside the root (ResolveDir's rules), its final component
// not followed (ErrSymlinkRefused). A missing file or directory is
// os.ErrNotExist. The agent's configuration files (the node configuration, the
// OS backend configuration) are read through it, so a symlink on the way lands
// where the host sees it, never in the agent's container.
func (h *Host) ReadFile(p string) ([]byte, error) {
	f, err := h.readHostFile(p)
	if err != nil {
		return nil, err
	}
	return f.Data, nil
}

// hostFileExists reports whether a host path (any type) exists inside the root.
// Symlinks are followed as ResolveDir follows them, the final one too (a binary
// under /lib -> usr/lib, or itself a link to /usr/libexec, is found): inside the
// root, only from directories root or the agent's user owns, and at most
// maxSymlinks of them.
func (h *Host) hostFileExists(p string) bool {
	for hops := 0; hops <= maxSymlinks; hops++ {
		dir, name, err := splitHostPath(p)
		if err != nil {
			return false
		}
		d, err := h.openDir(dir, false)
		if err != nil {
			return false
		}
		target, isLink, ok := lookupAt(d, name)
		_ = d.Close()
		if !ok {
			return false
		}
		if !isLink {
			return true
		}
		p = target
	}
	return false
}

// lookupAt looks at the entry name in d (a directory ResolveDir returned, named
// by its resolved host path): ok when it exists, and for a symlink in a
// directory root or the agent's user owns, the host path it points to (taken
// inside the root).
func lookupAt(d *os.File, name string) (target string, isLink, ok bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", false, false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", false, true
	}
	var dst unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &dst); err != nil || !trustedOwner(dst.Uid) {
		return "", true, false
	}
	t, err := readlinkAt(d, name)
	if err != nil {
		return "", true, false
	}
	if !path.IsAbs(t) {
		t = path.Join(d.Name(), t)
	}
	return path.Clean("/" + t), true, true
}

// writeHostFile writes a host file atomically (a temporary file in the same
// directory, fsync, rename, fsync of the directory) with mode and, when uid >= 0
// and the agent is root, owner set on the new file's descriptor. Missing
// directories are created 0755.
func (h *Host) writeHostFile(p string, data []byte, mode os.FileMode, uid, gid int) error {
	return h.writeHostFileFrom(p, bytes.NewReader(data), mode, uid, gid)
}

// writeHostFileFrom is writeHostFile streaming the content from r: a kubelet or
// kubeadm binary (~80 MiB each) backed up or restored this way is never held in
// memory (whole-file reads kept the agent at 184 MiB of heap after a worker's
// update on the real-node lane).
func (h *Host) writeHostFileFrom(p string, r io.Reader, mode os.FileMode, uid, gid int) error {
	dir, name, err := splitHostPath(p)
	if err != nil {
		return err
	}
	d, err := h.openDir(dir, true)
	if err != nil {
		return err
	}
	defer d.Close()
	return writeFileAt(d, p, name, r, mode, uid, gid)
}

// writeFileAt is writeHostFileFrom inside an opened directory.
func writeFileAt(d *os.File, p, name string, r io.Reader, mode os.FileMode, uid, gid int) error {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	tmp := "." + name + ".capi-inplace-" + hex.EncodeToString(rnd[:])
	dirfd := int(d.Fd())
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	cleanup := func(err error) error {
		_ = f.Close()
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		return cleanup(err)
	}
	if err := unix.Fchmod(fd, uint32(mode.Perm())); err != nil {
		return cleanup(err)
	}
	if err := fchown(fd, uid, gid); err != nil {
		return cleanup(err)
	}
	if err := f.Sync(); err != nil {
		return cleanup(err)
	}
	if err := f.Close(); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return syncDir(d, p)
}

// syncDir makes a rename in the directory durable. An O_PATH handle cannot be
// fsynced, so the directory is opened again through it.
func syncDir(d *os.File, p string) error {
	fd, err := unix.Openat(int(d.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync the directory of %s: %w", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync the directory of %s: %w", p, err)
	}
	return nil
}

// removeHostFile removes a host file (a symlink itself, never its target); a
// missing file is not an error.
func (h *Host) removeHostFile(p string) error {
	dir, name, err := splitHostPath(p)
	if err != nil {
		return err
	}
	d, err := h.openDir(dir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return syncDir(d, p)
}

// openRealSubdir creates (mode) and opens the directory name inside parent,
// refusing a symlink there: a user who owns parent could point it anywhere.
func openRealSubdir(parent *os.File, p, name string, mode os.FileMode) (*os.File, error) {
	if err := unix.Mkdirat(int(parent.Fd()), name, uint32(mode.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	fd, err := unix.Openat(int(parent.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("open %s: %w: it is not a real directory", p, ErrSymlinkRefused)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// inRoot returns a path for hostPath whose directory is resolved inside the host
// root (as openDir does; created 0755 when create is set) and pinned by an open
// handle: "/proc/self/fd/<dir>/<name>". Plain os calls on it (rename, remove,
// RemoveAll, create, an etcd client writing a file) then cannot be sent outside the
// root by a symlink on the way; the final name is the caller's (rename and remove
// act on the entry itself). release closes the handle; the path is valid until then.
func (h *Host) inRoot(hostPath string, create bool) (p string, release func(), err error) {
	dir, name, err := splitHostPath(hostPath)
	if err != nil {
		return "", nil, err
	}
	d, err := h.openDir(dir, create)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name), func() { _ = d.Close() }, nil
}

// PinDir returns the host directory dir resolved inside the root as every host
// path is (ResolveDir; created with mode, its missing parents 0755), as a path
// "/proc/self/fd/<n>" that stays on that directory until release. The agent's
// own state (journal, node key, artifact store, OS backend configuration) is
// read and written through it, so a symlink on the way cannot move it into the
// agent's container or through a directory another user owns.
func (h *Host) PinDir(dir string, mode os.FileMode) (p string, release func(), err error) {
	parent, name, err := splitHostPath(dir)
	if err != nil {
		return "", nil, err
	}
	d, err := h.openDir(parent, true)
	if err != nil {
		return "", nil, err
	}
	err = unix.Mkdirat(int(d.Fd()), name, uint32(mode.Perm()))
	_ = d.Close()
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return "", nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return h.hostDir(dir, false)
}

// hostDir is inRoot for a directory itself: the host directory (created 0755 with
// its parents when create is set) resolved inside the root, as "/proc/self/fd/<n>".
func (h *Host) hostDir(hostDir string, create bool) (p string, release func(), err error) {
	d, err := h.openDir(hostDir, create)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d", d.Fd()), func() { _ = d.Close() }, nil
}
