package etcd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capi-inplace/capi-inplace/internal/agent/helperbin"
)

// kubeadm's local etcd endpoint and the client certificate its own health checks use.
const (
	DefaultEndpoint = "https://127.0.0.1:2379"
	KubeadmCA       = "/etc/kubernetes/pki/etcd/ca.crt"
	KubeadmCert     = "/etc/kubernetes/pki/etcd/healthcheck-client.crt"
	KubeadmKey      = "/etc/kubernetes/pki/etcd/healthcheck-client.key"
)

// HelperName is the etcd helper binary (cmd/capi-inplace-etcd), which the agent's
// image carries beside the agent.
const HelperName = "capi-inplace-etcd"

// Local is the real Member. It runs the etcd helper binary (HelperName, package
// etcdhelper) for every request instead of linking etcd's client and etcdutl: they
// are half of the agent's binary and of its idle memory, and a node needs them
// only for the seconds of a control-plane update's snapshot, health checks or
// restore. Stopped needs no etcd library and runs in process.
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
	// Helper is the helper binary's path; empty means HelperName beside the
	// running executable, else on $PATH.
	Helper string
}

var (
	_ Member       = &Local{}
	_ QuorumReader = &Local{}
)

// KubeadmLocal is the member of a kubeadm control-plane node whose host root is root.
func KubeadmLocal(root string) *Local {
	return &Local{Endpoints: []string{DefaultEndpoint}, CAFile: filepath.Join(root, KubeadmCA),
		CertFile: filepath.Join(root, KubeadmCert), KeyFile: filepath.Join(root, KubeadmKey)}
}

// helper resolves the helper binary (helperbin.Locate).
func (l *Local) helper() (string, error) {
	p, err := helperbin.Locate(HelperName, l.Helper)
	if err != nil {
		return "", fmt.Errorf("etcd %w", err)
	}
	return p, nil
}

// run runs the helper's command with the member's flags, its stdout going to
// stdout. The helper's one-line error becomes the error's text. Requests other
// than the snapshot stream are also bounded here, in case the helper hangs.
func (l *Local) run(ctx context.Context, stdout io.Writer, command string, args ...string) error {
	return l.runWith(ctx, stdout, nil, command, args...)
}

// runWith is run with files passed to the helper as its descriptors 3, 4, ...
func (l *Local) runWith(ctx context.Context, stdout io.Writer, files []*os.File, command string, args ...string) error {
	path, err := l.helper()
	if err != nil {
		return err
	}
	if command != "snapshot" && command != "restore" {
		d, r := l.DialTimeout, l.RequestTimeout
		if d == 0 {
			d = 5 * time.Second
		}
		if r == 0 {
			r = 10 * time.Second
		}
		var cancel context.CancelFunc
		// Quorum probes every member in parallel (bounded each); 30 s is slack
		// for the helper's start on a loaded node.
		ctx, cancel = context.WithTimeout(ctx, d+2*r+30*time.Second)
		defer cancel()
	}
	argv := []string{"--endpoints=" + strings.Join(l.Endpoints, ",")}
	if l.CAFile != "" {
		argv = append(argv, "--cacert="+l.CAFile)
	}
	if l.CertFile != "" {
		argv = append(argv, "--cert="+l.CertFile)
	}
	if l.KeyFile != "" {
		argv = append(argv, "--key="+l.KeyFile)
	}
	if l.DialTimeout != 0 {
		argv = append(argv, "--dial-timeout="+l.DialTimeout.String())
	}
	if l.RequestTimeout != 0 {
		argv = append(argv, "--command-timeout="+l.RequestTimeout.String())
	}
	argv = append(append(argv, command), args...)
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Stdout = stdout
	cmd.ExtraFiles = files
	stderr := &helperbin.Tail{Limit: helperbin.StderrLimit}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(stderr.String()), HelperName+": "))
		if ctx.Err() != nil {
			return fmt.Errorf("etcd helper %s: %w", command, ctx.Err())
		}
		if msg == "" {
			return fmt.Errorf("etcd helper %s: %w", command, err)
		}
		return fmt.Errorf("%s (etcd helper %s: %w)", msg, command, err)
	}
	return nil
}

func (l *Local) runJSON(ctx context.Context, v any, command string) error {
	var out bytes.Buffer
	if err := l.run(ctx, &out, command); err != nil {
		return err
	}
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		return fmt.Errorf("etcd helper %s: decode its answer: %w", command, err)
	}
	return nil
}

// Status implements Member.
func (l *Local) Status(ctx context.Context) (Status, error) {
	var st Status
	err := l.runJSON(ctx, &st, "status")
	return st, err
}

// Healthy implements Member the way `etcdctl endpoint health` does: a
// linearizable read (permission denied still proves a quorum answered) and no alarm.
func (l *Local) Healthy(ctx context.Context) error { return l.run(ctx, io.Discard, "health") }

// Quorum implements QuorumReader (the helper probes every member).
func (l *Local) Quorum(ctx context.Context) (QuorumView, error) {
	var v QuorumView
	err := l.runJSON(ctx, &v, "quorum")
	return v, err
}

// Snapshot implements Member with the Maintenance API's snapshot stream, which
// the helper writes to w (straight into w when it is a file).
func (l *Local) Snapshot(ctx context.Context, w io.Writer) error {
	return l.run(ctx, w, "snapshot")
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

// Restore implements Member with etcdutl's snapshot restore (in the helper), which
// verifies the snapshot's hash and writes a data directory whose only member is
// c's, with the revision moved forward (RestoreRevisionBump).
func (l *Local) Restore(ctx context.Context, c RestoreConfig) error {
	if _, err := os.Stat(c.DataDir); err == nil {
		return fmt.Errorf("etcd restore: %s already exists", c.DataDir)
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	snapshot, err := passPath(c.SnapshotPath, &files)
	if err != nil {
		return err
	}
	dataDir, err := passPath(c.DataDir, &files)
	if err != nil {
		return err
	}
	return l.runWith(ctx, io.Discard, files, "restore", "--snapshot="+snapshot, "--data-dir="+dataDir, "--name="+c.Name,
		"--initial-advertise-peer-urls="+strings.Join(c.PeerURLs, ","), "--initial-cluster="+c.InitialCluster,
		"--initial-cluster-token="+c.InitialClusterToken)
}

// passPath makes a path usable by the helper process. The agent names host paths
// through directory handles it holds open ("/proc/self/fd/<n>/<name>", pinned
// inside the host root, kube.Host.inRoot), which mean nothing in another process:
// the directory is opened again (the same directory, not a new lookup) and handed
// to the helper as one of its descriptors (3 + its index in files), and the path
// names that descriptor. Other paths pass as they are.
func passPath(p string, files *[]*os.File) (string, error) {
	rest, ok := strings.CutPrefix(p, "/proc/self/fd/")
	if !ok {
		return p, nil
	}
	n, name, ok := strings.Cut(rest, "/")
	if !ok || n == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("etcd helper: cannot pass %s to it", p)
	}
	fd, err := unix.Open("/proc/self/fd/"+n, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("etcd helper: pass the directory of %s: %w", p, err)
	}
	*files = append(*files, os.NewFile(uintptr(fd), "/proc/self/fd/"+n))
	return fmt.Sprintf("/proc/self/fd/%d/%s", 2+len(*files), name), nil
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
