package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
)

// EtcdManifest is kubeadm's etcd static pod manifest.
const EtcdManifest = ManifestsDir + "/etcd.yaml"

// walReserve is room for the write-ahead log segment etcd preallocates in a
// restored data directory (64 MiB), on top of the database copy.
const walReserve = 64 << 20

// SnapshotSpace is the free space an etcd snapshot of a database of dbSize bytes
// needs in the work directory: the snapshot itself and, for a one-member cluster
// (the only one ever restored), the restored data directory beside it.
func SnapshotSpace(dbSize int64, members int) uint64 {
	need := uint64(max(dbSize, 0)) + walReserve/4
	if members == 1 {
		need += uint64(max(dbSize, 0)) + walReserve
	}
	return need
}

// snapshotFile is the etcd snapshot's name in its attempt directory.
const snapshotFile = "etcd-snapshot.db"

// SnapshotPath is the host path of an attempt's etcd snapshot.
func SnapshotPath(attempt string) string { return attemptDir(attempt) + "/" + snapshotFile }

// etcdRecord is what the snapshot saw, kept beside it: the restore refuses to run
// unless the cluster had exactly one member then.
type etcdRecord struct {
	ClusterID uint64            `json:"clusterID"`
	Members   []etcd.MemberInfo `json:"members"`
	DBSize    int64             `json:"dbSize"`
}

func (h *Host) etcdMember() (etcd.Member, error) {
	if h.Etcd == nil {
		return nil, errors.New("no etcd member is configured for this node")
	}
	return h.Etcd, nil
}

// EtcdSnapshot saves a snapshot of the local etcd member for the attempt and
// returns the cluster's member count. It first checks that the work directory's
// file system has room for it (SnapshotSpace); the snapshot streams into a
// temporary file that is fsynced and renamed, so a snapshot file is always
// complete.
func (h *Host) EtcdSnapshot(ctx context.Context, attempt string) (int, error) {
	m, err := h.etcdMember()
	if err != nil {
		return 0, err
	}
	st, err := m.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the etcd cluster before the snapshot: %w", err)
	}
	dir, release, err := h.hostDir(attemptDir(attempt), true)
	if err != nil {
		return 0, err
	}
	defer release()
	if err := os.Chmod(dir, 0o700); err != nil {
		return 0, fmt.Errorf("create %s: %w", attemptDir(attempt), err)
	}
	need := SnapshotSpace(st.DBSize, len(st.Members))
	free, err := h.free(dir)
	if err != nil {
		return 0, err
	}
	if free < need {
		return 0, fmt.Errorf("%w: %s has %d MiB free, the etcd snapshot of %d MiB (and its restore) needs %d MiB",
			ErrDiskFull, WorkDir, free>>20, st.DBSize>>20, need>>20)
	}
	rec, err := json.MarshalIndent(etcdRecord{ClusterID: st.ClusterID, Members: st.Members, DBSize: st.DBSize}, "", "  ")
	if err != nil {
		return 0, fmt.Errorf("encode etcd members: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "etcd-members.json"), rec, 0o600); err != nil {
		return 0, fmt.Errorf("record etcd members: %w", err)
	}
	if err := h.writeSnapshot(ctx, m, filepath.Join(dir, snapshotFile)); err != nil {
		return 0, err
	}
	return len(st.Members), nil
}

func (h *Host) writeSnapshot(ctx context.Context, m etcd.Member, path string) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".etcd-snapshot-*")
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := m.Snapshot(ctx, tmp); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("etcd snapshot: fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// EtcdHealthy checks the local etcd member.
func (h *Host) EtcdHealthy(ctx context.Context) error {
	m, err := h.etcdMember()
	if err != nil {
		return err
	}
	if err := m.Healthy(ctx); err != nil {
		return fmt.Errorf("etcd member health: %w", err)
	}
	return nil
}

// EtcdStopTimeout bounds the wait for the kubelet to stop the etcd static pod
// (kubeadm's etcd pod has the default 30 s grace period).
const EtcdStopTimeout = 2 * time.Minute

// RestoreEtcd restores the attempt's snapshot into the node's etcd member, which
// must have been the only member of its cluster when the snapshot was taken
// (state.DeriveRollback never schedules it otherwise; this checks again). As
// Kubernetes documents for a restore, it first stops the node's kube-apiserver
// (stopAPIServer), then stops the member by moving its static pod manifest out of
// the kubelet's manifest directory (into the attempt directory) and waiting until
// no process holds the data directory, restores with the member's own name, peer
// URLs and cluster token as its manifest starts it (so a later `kubeadm join`
// finds the member it expects), swaps the data directory (the replaced one is kept
// in the attempt directory) and puts both manifests back, etcd's first, which
// starts the member and then the API server on the restored data. Every step can
// repeat after a crash.
func (h *Host) RestoreEtcd(ctx context.Context, attempt string) error {
	m, err := h.etcdMember()
	if err != nil {
		return err
	}
	dir, release, err := h.hostDir(attemptDir(attempt), false)
	if err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	defer release()
	raw, err := os.ReadFile(filepath.Join(dir, "etcd-members.json"))
	if err != nil {
		return fmt.Errorf("etcd restore: read the member list taken with the snapshot: %w", err)
	}
	var rec etcdRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("etcd restore: decode the member list taken with the snapshot: %w", err)
	}
	if len(rec.Members) != 1 {
		return fmt.Errorf("etcd restore refused: %w (it had %d when the snapshot was taken)", etcd.ErrNotSingleMember, len(rec.Members))
	}
	parked := filepath.Join(dir, "etcd.yaml")
	parkedAPI := filepath.Join(dir, apiServerParked)
	done := filepath.Join(dir, "etcd-restored")
	if _, err := os.Stat(done); err != nil {
		if err := stillSingleMember(ctx, m); err != nil {
			return err
		}
		// The rescue static pod is in place (the executor arms it before any
		// action of a control plane's rollback, state.RescueWanted): a power
		// cut from here on leaves the node without its API server, so no
		// DaemonSet pod, and the rescue pod repeats this restore.
		if err := h.restoreEtcdData(ctx, m, dir, parked, parkedAPI); err != nil {
			// Failed or interrupted: until the data directory was swapped, the
			// member's own data is intact, so it is started again, and the API
			// server with it, rather than left down with the control plane (a
			// repeat stops them again). Once swapped, only a repeat of the
			// restore may start them.
			if _, errSwapped := os.Lstat(filepath.Join(dir, "etcd-replaced")); errors.Is(errSwapped, os.ErrNotExist) {
				if errBack := errors.Join(h.unparkEtcdManifest(parked), h.startAPIServer(parkedAPI)); errBack != nil {
					return errors.Join(err, errBack)
				}
			}
			return err
		}
	}
	if err := h.unparkEtcdManifest(parked); err != nil {
		return err
	}
	return h.startAPIServer(parkedAPI)
}

// membershipCheckTimeout bounds the live membership check before a restore.
const membershipCheckTimeout = 5 * time.Second

// stillSingleMember checks, at restore time, that the member's cluster still has
// one member: one added since the snapshot (KCP scaling up, a manual join) would
// be cut off by the restore, left with data of its own beside a new one-member
// cluster. A member that does not answer (broken by the update, or stopped by an
// earlier run of this restore) is restored on the snapshot's record: a peer it
// may have gained has no quorum without it.
func stillSingleMember(ctx context.Context, m etcd.Member) error {
	ctx, cancel := context.WithTimeout(ctx, membershipCheckTimeout)
	defer cancel()
	st, err := m.Status(ctx)
	if err != nil {
		return nil
	}
	if len(st.Members) != 1 {
		return fmt.Errorf("etcd restore refused: %w (it has %d now; the snapshot saw one)", etcd.ErrNotSingleMember, len(st.Members))
	}
	return nil
}

// unparkEtcdManifest puts the parked etcd manifest (a path in the attempt
// directory as hostDir resolved it) back when it is not in the manifest directory:
// the kubelet then starts the member.
func (h *Host) unparkEtcdManifest(parked string) error {
	if _, err := h.readHostFile(EtcdManifest); errors.Is(err, os.ErrNotExist) {
		manifest, err := os.ReadFile(parked)
		if err != nil {
			return fmt.Errorf("etcd restore: read the parked manifest: %w", err)
		}
		if err := h.writeHostFile(EtcdManifest, manifest, 0o600, -1, -1); err != nil {
			return fmt.Errorf("etcd restore: put the manifest back: %w", err)
		}
	}
	return nil
}

// restoreEtcdData runs the restore inside the attempt directory dir (a path
// hostDir resolved) with the etcd manifest parked at parked and the API server's
// at parkedAPI.
func (h *Host) restoreEtcdData(ctx context.Context, m etcd.Member, dir, parked, parkedAPI string) error {
	if err := h.stopAPIServer(ctx, parkedAPI); err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	if live, err := h.readHostFile(EtcdManifest); err == nil {
		if err := atomicfile.Write(parked, live.Data, 0o600); err != nil {
			return fmt.Errorf("etcd restore: park the manifest: %w", err)
		}
		if err := h.removeHostFile(EtcdManifest); err != nil {
			return fmt.Errorf("etcd restore: stop the member: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("etcd restore: %w", err)
	}
	manifest, err := os.ReadFile(parked)
	if err != nil {
		return fmt.Errorf("etcd restore: read the etcd manifest: %w", err)
	}
	cfg, err := etcd.ParseManifest(manifest)
	if err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	data, release, err := h.inRoot(cfg.DataDir, true)
	if err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	defer release()
	if err := h.waitStopped(ctx, m, data); err != nil {
		return err
	}
	restore := filepath.Join(dir, "etcd-restore")
	if err := os.RemoveAll(restore); err != nil {
		return fmt.Errorf("etcd restore: clean %s: %w", restore, err)
	}
	if err := m.Restore(ctx, etcd.RestoreConfig{SnapshotPath: filepath.Join(dir, snapshotFile), DataDir: restore,
		Name: cfg.Name, PeerURLs: cfg.PeerURLs, InitialCluster: cfg.SingleMemberCluster(), InitialClusterToken: cfg.InitialClusterToken}); err != nil {
		return err
	}
	replaced := filepath.Join(dir, "etcd-replaced")
	_, errReplaced := os.Lstat(replaced)
	_, errCurrent := os.Lstat(data)
	switch {
	case errors.Is(errReplaced, os.ErrNotExist) && errCurrent == nil:
		if err := os.Rename(data, replaced); err != nil {
			return fmt.Errorf("etcd restore: move the current etcd data aside: %w", err)
		}
	case errReplaced == nil && errCurrent == nil:
		// A previous run swapped its restore in and stopped before the marker.
		if err := os.RemoveAll(data); err != nil {
			return fmt.Errorf("etcd restore: remove an earlier restore: %w", err)
		}
	}
	if err := os.Rename(restore, data); err != nil {
		return fmt.Errorf("etcd restore: move the restored etcd data in place: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(data)); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "etcd-restored"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600)
}

func (h *Host) waitStopped(ctx context.Context, m etcd.Member, dataDir string) error {
	ctx, cancel := context.WithTimeout(ctx, EtcdStopTimeout)
	defer cancel()
	for {
		stopped, err := m.Stopped(ctx, dataDir)
		if err != nil {
			return fmt.Errorf("etcd restore: %w", err)
		}
		if stopped {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd restore: the etcd member still runs %s after its manifest was moved away", EtcdStopTimeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
