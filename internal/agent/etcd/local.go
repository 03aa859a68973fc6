package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// kubeadm's local etcd endpoint and the client certificate its own health checks use.
const (
	DefaultEndpoint = "https://127.0.0.1:2379"
	KubeadmCA       = "/etc/kubernetes/pki/etcd/ca.crt"
	KubeadmCert     = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
	KubeadmKey      = "/etc/kubernetes/pki/etcd/healthcheck-client.key"
)

// Local is the real Member: etcd's client for the running member and etcdutl's
// snapshot package for the offline restore.
type Local struct {
	// Endpoints of the local member.
	Endpoints []string
	// CAFile, CertFile and KeyFile are agent-view paths of the client TLS
	// material; all empty for a plain-HTTP member (tests).
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds connecting; 5 s when zero.
	DialTimeout time.Duration
	// RequestTimeout bounds each status, health or member request (not the
	// snapshot stream, which the caller's context bounds); 10 s when zero.
	RequestTimeout time.Duration
}

func (l *Local) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := l.RequestTimeout
	if d == 0 {
		d = 10 * time.Second
	}
	return context.WithTimeout(ctx, d)
}

var _ Member = &Local{}

// KubeadmLocal is the member of a kubeadm control-plane node whose host root is root.
func KubeadmLocal(root string) *Local {
	return &Local{Endpoints: []string{DefaultEndpoint}, CAFile: filepath.Join(root, KubeadmCA),
		CertFile: filepath.Join(root, KubeadmCert), KeyFile: filepath.Join(root, KubeadmKey)}
}

func (l *Local) client() (*clientv3.Client, error) {
	var tlsCfg *tls.Config
	if l.CAFile != "" || l.CertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: l.CAFile, CertFile: l.CertFile, KeyFile: l.KeyFile}
		c, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		tlsCfg = c
	}
	timeout := l.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: l.Endpoints, TLS: tlsCfg, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", l.Endpoints, err)
	}
	return c, nil
}

// Status implements Member.
func (l *Local) Status(ctx context.Context) (Status, error) {
	c, err := l.client()
	if err != nil {
		return Status{}, err
	}
	defer c.Close()
	ctx, cancel := l.requestContext(ctx)
	defer cancel()
	st, err := c.Status(ctx, l.Endpoints[0])
	if err != nil {
		return Status{}, fmt.Errorf("etcd status of %s: %w", l.Endpoints[0], err)
	}
	ml, err := c.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return Status{}, fmt.Errorf("etcd member list: %w", err)
	}
	out := Status{ClusterID: st.Header.ClusterId, MemberID: st.Header.MemberId, DBSize: st.DbSize}
	for _, m := range ml.Members {
		out.Members = append(out.Members, MemberInfo{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	return out, nil
}

// Healthy implements Member the way `etcdctl endpoint health` does: a
// linearizable read (permission denied still proves a quorum answered) and no alarm.
func (l *Local) Healthy(ctx context.Context) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := l.requestContext(ctx)
	defer cancel()
	if _, err := c.Get(ctx, "health"); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("etcd member %s is unhealthy: %w", l.Endpoints[0], err)
	}
	alarms, err := c.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("etcd alarm list: %w", err)
	}
	if len(alarms.Alarms) > 0 {
		return fmt.Errorf("etcd member %s is unhealthy: alarm %s", l.Endpoints[0], alarms.Alarms[0].Alarm)
	}
	return nil
}

// Snapshot implements Member with the Maintenance API's snapshot stream.
func (l *Local) Snapshot(ctx context.Context, w io.Writer) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	defer c.Close()
	rc, err := c.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	return nil
}

// RestoreRevisionBump is how far a restore moves etcd's revision past the
// snapshot's, the value Kubernetes documents for restoring a cluster's etcd
// (etcdutl snapshot restore --bump-revision 1000000000 --mark-compacted). Without
// it the revision goes back to the snapshot's: every watch of the API server and
// its clients (the kubelet's, the agent's own Node watch) then waits for a
// revision that the restored etcd reaches only after as many writes as were lost,
// and sees nothing; on the real-node lane the agent never saw the retry's
// annotations after a rollback. Marking the bumped revision compacted makes every
// such watch fail at once, so its client lists again.
const RestoreRevisionBump = 1_000_000_000

// Restore implements Member with etcdutl's snapshot restore, which verifies the
// snapshot's hash and writes a data directory whose only member is c's, with the
// revision moved forward (RestoreRevisionBump).
func (l *Local) Restore(_ context.Context, c RestoreConfig) error {
	if _, err := os.Stat(c.DataDir); err == nil {
		return fmt.Errorf("etcd restore: %s already exists", c.DataDir)
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        c.SnapshotPath,
		Name:                c.Name,
		OutputDataDir:       c.DataDir,
		PeerURLs:            c.PeerURLs,
		InitialCluster:      c.InitialCluster,
		InitialClusterToken: c.InitialClusterToken,
		RevisionBump:        RestoreRevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return fmt.Errorf("etcd restore of %s: %w", c.SnapshotPath, err)
	}
	return nil
}

// Stopped implements Member: etcd holds an exclusive flock on member/snap/db
// while it runs, in whatever container or namespace it runs.
func (l *Local) Stopped(_ context.Context, dataDir string) (bool, error) {
	inUse, err := DataDirInUse(dataDir)
	return !inUse, err
}

// DataDirInUse reports whether a process holds etcd's lock on the data directory's
// database; a missing database is not in use.
func DataDirInUse(dataDir string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, "member", "snap", "db"), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open etcd database: %w", err)
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("lock etcd database: %w", err)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false, nil
}
