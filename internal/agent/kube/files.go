package kube

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// BackupSet returns the host paths the Kubernetes part of a plan may change
// (users' files depend on the host's /etc/passwd, hence a method).
func (h *Host) BackupSet(p *protocol.NodePlan) []string {
	var out []string
	for _, f := range p.Files {
		out = append(out, f.Path)
	}
	out = append(out, h.usersBackupSet(p)...)
	out = append(out, h.ntpBackupSet(p)...)
	out = append(out, KubeadmFlagsPath, KubeletConfig, KubeletInstanceConfig)
	if p.Kubernetes.Action != protocol.KubeadmNone {
		out = append(out, KubeadmBinary, KubeletBinary)
	}
	if p.Kubernetes.Role == protocol.RoleControlPlane && (p.Kubernetes.Action != protocol.KubeadmNone || len(p.ClusterConfiguration) > 0) {
		for _, c := range StaticPods() {
			out = append(out, ManifestsDir+"/"+c+".yaml")
		}
		for _, c := range []string{"admin", "super-admin", "controller-manager", "scheduler", "kubelet"} {
			out = append(out, "/etc/kubernetes/"+c+".conf")
		}
	}
	seen := map[string]bool{}
	uniq := out[:0]
	for _, p := range out {
		if !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	return uniq
}

type backupEntry struct {
	Path    string      `json:"path"`
	Existed bool        `json:"existed"`
	Mode    os.FileMode `json:"mode,omitempty"`
	UID     int         `json:"uid"`
	GID     int         `json:"gid"`
}

func (h *Host) backupDir(attempt string) string { return attemptDir(attempt) + "/backup" }

// Backup copies every path to the attempt's backup directory and records which
// paths did not exist (a restore removes those). The manifest is written last:
// when it exists the backup is complete and is never taken again in this attempt,
// so a repeated run cannot overwrite the pre-change copies with changed files; a
// new attempt (a retry of the same plan) has a directory of its own.
func (h *Host) Backup(_ context.Context, hash string, paths []string) error {
	manifest := h.backupDir(hash) + "/manifest.json"
	if _, err := h.readHostFile(manifest); err == nil {
		return nil
	}
	entries := make([]backupEntry, 0, len(paths))
	for _, p := range paths {
		e, err := h.backupOne(hash, p)
		if err != nil {
			return err
		}
		entries = append(entries, e)
	}
	raw, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return fmt.Errorf("encode backup manifest: %w", err)
	}
	return h.writeHostFile(manifest, raw, 0o600, -1, -1)
}

// backupOne copies one host file into the backup, streamed (binaries are ~80 MiB).
func (h *Host) backupOne(hash, p string) (backupEntry, error) {
	e := backupEntry{Path: p}
	f, st, err := h.openHostFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return e, fmt.Errorf("back up %s: %w", p, err)
	}
	defer f.Close()
	e.Existed, e.Mode, e.UID, e.GID = true, os.FileMode(st.Mode).Perm(), int(st.Uid), int(st.Gid)
	if err := h.writeHostFileFrom(h.backupDir(hash)+"/files"+p, f, 0o600, -1, -1); err != nil {
		return e, fmt.Errorf("back up %s: %w", p, err)
	}
	return e, nil
}

// Restore puts every backed-up path back as it was: content, mode and owner, or
// absence. A path already as it was is left alone, so a read-only /usr whose
// kubeadm and kubelet the update never changed (an ostree or bootc host, a
// Kubernetes-only plan) restores fine.
func (h *Host) Restore(_ context.Context, attempt string) error {
	return h.restore(attempt, false)
}

// RestoreWithImageRollback is Restore for a rollback that also returns the OS image
// at the next reboot (DeriveRollback runs that first): a path that cannot be
// written because its file system is read-only belongs to the image (ostree's and
// bootc's /usr) and comes back with it, so it is skipped instead of failing the
// rollback. On a writable file system every path is restored as by Restore.
func (h *Host) RestoreWithImageRollback(_ context.Context, attempt string) error {
	return h.restore(attempt, true)
}

func (h *Host) restore(attempt string, imageOwnsReadOnly bool) error {
	manifest, err := h.readHostFile(h.backupDir(attempt) + "/manifest.json")
	if errors.Is(err, os.ErrNotExist) {
		return nil // the backup never completed, so nothing was changed after it
	}
	if err != nil {
		return fmt.Errorf("read backup manifest: %w", err)
	}
	var entries []backupEntry
	if err := json.Unmarshal(manifest.Data, &entries); err != nil {
		return fmt.Errorf("decode backup manifest: %w", err)
	}
	for _, e := range entries {
		if !e.Existed {
			f, _, err := h.openHostFile(e.Path)
			if errors.Is(err, os.ErrNotExist) {
				continue // already absent
			}
			if err == nil {
				_ = f.Close()
			}
			if err := h.removeHostFile(e.Path); err != nil {
				if imageOwnsReadOnly && errors.Is(err, unix.EROFS) {
					continue
				}
				return fmt.Errorf("restore %s: %w", e.Path, err)
			}
			continue
		}
		savedPath := h.backupDir(attempt) + "/files" + e.Path
		if h.hostFilesEqual(e.Path, savedPath, e.Mode, e.UID, e.GID) {
			continue
		}
		if err := h.restoreOne(e, savedPath); err != nil {
			if imageOwnsReadOnly && errors.Is(err, unix.EROFS) {
				continue
			}
			return fmt.Errorf("restore %s: %w", e.Path, err)
		}
	}
	return nil
}

// restoreOne writes the saved copy back over e.Path, streamed.
func (h *Host) restoreOne(e backupEntry, savedPath string) error {
	saved, _, err := h.openHostFile(savedPath)
	if err != nil {
		return err
	}
	defer saved.Close()
	return h.writeHostFileFrom(e.Path, saved, e.Mode, e.UID, e.GID)
}

// WriteFiles writes the plan's files atomically with their modes and owners.
func (h *Host) WriteFiles(_ context.Context, files []protocol.File) error {
	for _, f := range files {
		mode := os.FileMode(0o644)
		if f.Permissions != "" {
			m, err := strconv.ParseUint(f.Permissions, 8, 32)
			if err != nil {
				return fmt.Errorf("file %s: permissions %q: %w", f.Path, f.Permissions, err)
			}
			mode = os.FileMode(m)
		}
		uid, gid, err := h.lookupOwner(f.Owner)
		if err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
		if err := h.writeHostFile(f.Path, f.Content, mode.Perm(), uid, gid); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	return nil
}

// lookupOwner resolves "user", "user:group" or numeric ids in the host's
// /etc/passwd and /etc/group; -1 when no owner is asked for.
func (h *Host) lookupOwner(owner string) (int, int, error) {
	if owner == "" {
		return -1, -1, nil
	}
	user, group, _ := strings.Cut(owner, ":")
	uid, gidOfUser, err := h.lookupID("/etc/passwd", user, 2, 3)
	if err != nil {
		return 0, 0, fmt.Errorf("owner %q: %w", owner, err)
	}
	gid := gidOfUser
	if group != "" {
		if gid, _, err = h.lookupID("/etc/group", group, 2, 2); err != nil {
			return 0, 0, fmt.Errorf("owner %q: %w", owner, err)
		}
	}
	return uid, gid, nil
}

func (h *Host) lookupID(db, name string, idField, gidField int) (int, int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, n, nil
	}
	f, err := h.readHostFile(db)
	if err != nil {
		if name == "root" {
			return 0, 0, nil
		}
		return 0, 0, fmt.Errorf("look up %s: %w", name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(f.Data))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > gidField && fields[0] == name {
			id, err1 := strconv.Atoi(fields[idField])
			gid, err2 := strconv.Atoi(fields[gidField])
			if err1 == nil && err2 == nil {
				return id, gid, nil
			}
		}
	}
	if name == "root" {
		return 0, 0, nil
	}
	return 0, 0, fmt.Errorf("%s not found in the host's %s", name, db)
}

// KubeletFlags merges the plan's kubelet extra args into kubeadm-flags.env
// (KUBELET_KUBEADM_ARGS="--a=b ..."): args of the plan replace args of the same
// name, others are kept in order.
func (h *Host) KubeletFlags(_ context.Context, args []protocol.Arg) error {
	for _, a := range args {
		if err := protocol.ValidateKubeletArg(a); err != nil {
			return err
		}
	}
	var env string
	mode, uid, gid := os.FileMode(0o644), -1, -1
	switch cur, err := h.readHostFile(KubeadmFlagsPath); {
	case err == nil:
		env, mode, uid, gid = string(cur.Data), cur.Mode, cur.UID, cur.GID
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("read %s: %w", KubeadmFlagsPath, err)
	}
	merged := MergeKubeletFlags(env, args)
	if err := h.writeHostFile(KubeadmFlagsPath, []byte(merged), mode, uid, gid); err != nil {
		return fmt.Errorf("write %s: %w", KubeadmFlagsPath, err)
	}
	return nil
}

// MergeKubeletFlags is the pure part of KubeletFlags.
func MergeKubeletFlags(env string, args []protocol.Arg) string {
	const key = "KUBELET_KUBEADM_ARGS="
	var current string
	var other []string
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		if strings.HasPrefix(line, key) {
			current = strings.Trim(strings.TrimPrefix(line, key), `"`)
		} else if strings.TrimSpace(line) != "" {
			other = append(other, line)
		}
	}
	type kv struct{ name, value string }
	var flags []kv
	for _, f := range strings.Fields(current) {
		n, v, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		flags = append(flags, kv{n, v})
	}
	for _, a := range args {
		found := false
		for i := range flags {
			if flags[i].name == a.Name {
				flags[i].value, found = a.Value, true
			}
		}
		if !found {
			flags = append(flags, kv{a.Name, a.Value})
		}
	}
	parts := make([]string, len(flags))
	for i, f := range flags {
		parts[i] = "--" + f.name + "=" + f.value
	}
	return strings.Join(append(other, key+`"`+strings.Join(parts, " ")+`"`), "\n") + "\n"
}
