package etcdhelper

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// Direct is the member in process: etcd's client for the running member and
// etcdutl's snapshot package for the offline restore.
type Direct struct {
	// Endpoints of the local member.
	Endpoints []string
	// CAFile, CertFile and KeyFile are the client TLS material; all empty for a
	// plain-HTTP member (tests).
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds connecting; 5 s when zero.
	DialTimeout time.Duration
	// RequestTimeout bounds each status, health or member request (not the
	// snapshot stream, which the caller's context bounds); 10 s when zero.
	RequestTimeout time.Duration
}

func (d *Direct) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	t := d.RequestTimeout
	if t == 0 {
		t = 10 * time.Second
	}
	return context.WithTimeout(ctx, t)
}

func (d *Direct) client() (*clientv3.Client, error) {
	if len(d.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoint")
	}
	var tlsCfg *tls.Config
	if d.CAFile != "" || d.CertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: d.CAFile, CertFile: d.CertFile, KeyFile: d.KeyFile}
		c, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		tlsCfg = c
	}
	timeout := d.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: d.Endpoints, TLS: tlsCfg, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", d.Endpoints, err)
	}
	return c, nil
}

// Status reads the cluster ID, the member list and the database size.
func (d *Direct) Status(ctx context.Context) (etcd.Status, error) {
	c, err := d.client()
	if err != nil {
		return etcd.Status{}, err
	}
	defer c.Close()
	ctx, cancel := d.requestContext(ctx)
	defer cancel()
	st, err := c.Status(ctx, d.Endpoints[0])
	if err != nil {
		return etcd.Status{}, fmt.Errorf("etcd status of %s: %w", d.Endpoints[0], err)
	}
	ml, err := c.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return etcd.Status{}, fmt.Errorf("etcd member list: %w", err)
	}
	out := etcd.Status{ClusterID: st.Header.ClusterId, MemberID: st.Header.MemberId, DBSize: st.DbSize}
	for _, m := range ml.Members {
		out.Members = append(out.Members, etcd.MemberInfo{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	return out, nil
}

// Healthy checks the member the way `etcdctl endpoint health` does: a
// linearizable read (permission denied still proves a quorum answered) and no alarm.
func (d *Direct) Healthy(ctx context.Context) error {
	c, err := d.client()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := d.requestContext(ctx)
	defer cancel()
	if _, err := c.Get(ctx, "health"); err != nil && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("etcd member %s is unhealthy: %w", d.Endpoints[0], err)
	}
	alarms, err := c.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("etcd alarm list: %w", err)
	}
	if len(alarms.Alarms) > 0 {
		return fmt.Errorf("etcd member %s is unhealthy: alarm %s", d.Endpoints[0], alarms.Alarms[0].Alarm)
	}
	return nil
}

// Snapshot streams a snapshot of the member's database to w (the Maintenance
// API's snapshot stream).
func (d *Direct) Snapshot(ctx context.Context, w io.Writer) error {
	c, err := d.client()
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

// Restore creates the data directory c.DataDir (which must not exist) from a
// snapshot with etcdutl's snapshot restore, which verifies the snapshot's hash and
// writes a data directory whose only member is c's, with the revision moved
// forward (etcd.RestoreRevisionBump) and marked compacted.
func (d *Direct) Restore(_ context.Context, c etcd.RestoreConfig) error {
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
		RevisionBump:        etcd.RestoreRevisionBump,
		MarkCompacted:       true,
	})
	if err != nil {
		return fmt.Errorf("etcd restore of %s: %w", c.SnapshotPath, err)
	}
	return nil
}
