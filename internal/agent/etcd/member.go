package etcd

import (
	"context"
	"errors"
	"io"
)

// MemberInfo is one member of the cluster as etcd lists it.
type MemberInfo struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	// Learner members do not vote.
	Learner bool
}

// Status is the cluster as the local member sees it.
type Status struct {
	ClusterID uint64
	MemberID  uint64
	Members   []MemberInfo
	// DBSize is the size of the member's backend database in bytes, the size of
	// a snapshot to within a few pages.
	DBSize int64
}

// RestoreConfig says what a snapshot is restored into and as which member.
type RestoreConfig struct {
	// SnapshotPath is the snapshot file (agent's view).
	SnapshotPath string
	// DataDir is the new data directory; it must not exist.
	DataDir string
	// Name, PeerURLs, InitialCluster and InitialClusterToken are the member's
	// identity (see ParseManifest).
	Name                string
	PeerURLs            []string
	InitialCluster      string
	InitialClusterToken string
}

// Member is the node's local etcd member.
type Member interface {
	// Status reads the cluster ID, the member list and the database size.
	Status(ctx context.Context) (Status, error)
	// Healthy fails unless the member serves a linearizable read and has no alarm.
	Healthy(ctx context.Context) error
	// Snapshot streams a snapshot of the member's database to w.
	Snapshot(ctx context.Context, w io.Writer) error
	// Restore creates a data directory from a snapshot, offline.
	Restore(ctx context.Context, c RestoreConfig) error
	// Stopped reports whether no etcd process uses the data directory.
	Stopped(ctx context.Context, dataDir string) (bool, error)
}

// ErrNotSingleMember is returned where only a one-member cluster may be acted on.
var ErrNotSingleMember = errors.New("etcd cluster does not have exactly one member")
