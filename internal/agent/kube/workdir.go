package kube

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"

	"golang.org/x/sys/unix"
)

// AttemptsDir holds one directory per update attempt (backups, the etcd snapshot,
// restore markers), named by the attempt ID the executor records in the journal
// when the attempt starts. Keying by attempt, not by plan hash, is what makes a
// retry of the same plan (or A -> B -> A) take fresh backups and a fresh snapshot.
const AttemptsDir = WorkDir + "/attempts"

// attemptDir is the host path of an attempt's work directory.
func attemptDir(attempt string) string { return AttemptsDir + "/" + attempt }

// ErrDiskFull is wrapped by errors that mean the host has no room for the agent's
// work (the status reason is protocol.ReasonDiskFull); a write that fails with
// ENOSPC is recognised as well (see IsDiskFull).
var ErrDiskFull = errors.New("not enough free disk space")

// IsDiskFull reports whether err means the host's disk is full.
func IsDiskFull(err error) bool {
	return errors.Is(err, ErrDiskFull) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}

// freeBytes is the space an unprivileged-by-reserve writer may still use on the
// file system of path (statfs f_bavail).
func freeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

func (h *Host) free(path string) (uint64, error) {
	if h.FreeBytes != nil {
		return h.FreeBytes(path)
	}
	return freeBytes(path)
}

// legacyPlanDir matches the per-plan directories of agents before attempts
// (WorkDir/<32 hex plan hash>), which nothing reads any more.
var legacyPlanDir = regexp.MustCompile(`^[0-9a-f]{32}$`)

// CollectAttempts removes the work directories of every attempt not in keep
// (and the per-plan directories of older agents). The executor keeps the
// current attempt and the last committed one: that one's backups stay until the
// next attempt commits. Directories are resolved inside the host root (inRoot):
// a symlinked work directory can never make it remove anything outside.
func (h *Host) CollectAttempts(keep ...string) error {
	var errs []error
	attempts, err := h.listDirs(AttemptsDir)
	if err != nil {
		return err
	}
	for _, name := range attempts {
		if !slices.Contains(keep, name) {
			errs = append(errs, h.removeAllInRoot(attemptDir(name)))
		}
	}
	legacy, err := h.listDirs(WorkDir)
	if err != nil {
		errs = append(errs, err)
	}
	for _, name := range legacy {
		if legacyPlanDir.MatchString(name) {
			errs = append(errs, h.removeAllInRoot(WorkDir+"/"+name))
		}
	}
	return errors.Join(errs...)
}

// removeAllInRoot removes a host directory tree (a symlink at its name is removed,
// never followed).
func (h *Host) removeAllInRoot(hostPath string) error {
	p, release, err := h.inRoot(hostPath, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", hostPath, err)
	}
	defer release()
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", hostPath, err)
	}
	return nil
}

// listDirs lists the real directories (not symlinks) in a host directory; a
// missing one has none.
func (h *Host) listDirs(hostDir string) ([]string, error) {
	d, err := h.openDir(hostDir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", hostDir, err)
	}
	defer d.Close()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/self/fd/%d", d.Fd()))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", hostDir, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Attempts lists the attempt directories present on the host.
func (h *Host) Attempts() ([]string, error) {
	return h.listDirs(AttemptsDir)
}
