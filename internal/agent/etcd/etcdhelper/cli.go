package etcdhelper

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// Usage is the helper's command line (etcd.Local builds it).
const Usage = `usage: capi-inplace-etcd [--endpoints=URL,...] [--cacert=F --cert=F --key=F]
                         [--dial-timeout=5s] [--command-timeout=10s] <command>
commands:
  status     print the cluster ID, member list and database size (JSON)
  health     exit 0 when the member serves a linearizable read and has no alarm
  snapshot   write a snapshot of the member's database to stdout
  quorum     print every member's health as the local member sees the cluster (JSON)
  restore --snapshot=F --data-dir=D --name=N --initial-advertise-peer-urls=URL,...
          --initial-cluster=C --initial-cluster-token=T
             create the data directory D (it must not exist) from the snapshot F
`

// errUsage marks a command line the helper does not understand (exit code 2).
var errUsage = errors.New("usage")

// Main runs the helper with args (without the program name) and returns its exit
// code: 0, 1 when the command failed (one line on stderr says why), 2 for a
// command line it does not understand.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "capi-inplace-etcd: %v\n%s", err, Usage)
		return 2
	default:
		fmt.Fprintf(stderr, "capi-inplace-etcd: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var d Direct
	var endpoints string
	fs := flag.NewFlagSet("capi-inplace-etcd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&endpoints, "endpoints", etcd.DefaultEndpoint, "Comma-separated client URLs of the local member.")
	fs.StringVar(&d.CAFile, "cacert", "", "CA bundle of the member's serving certificate.")
	fs.StringVar(&d.CertFile, "cert", "", "Client certificate.")
	fs.StringVar(&d.KeyFile, "key", "", "Client key.")
	fs.DurationVar(&d.DialTimeout, "dial-timeout", 0, "Connect timeout (default 5s).")
	fs.DurationVar(&d.RequestTimeout, "command-timeout", 0, "Timeout of each request but the snapshot stream (default 10s).")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	d.Endpoints = splitList(endpoints)
	if len(d.Endpoints) == 0 {
		return fmt.Errorf("%w: --endpoints is empty", errUsage)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd != "restore" && len(rest) > 0 {
		return fmt.Errorf("%w: %s takes no arguments", errUsage, cmd)
	}
	switch cmd {
	case "status":
		st, err := d.Status(ctx)
		if err != nil {
			return err
		}
		return writeJSON(stdout, st)
	case "health":
		return d.Healthy(ctx)
	case "snapshot":
		// Buffered: the Maintenance API sends 32 KiB chunks, a pipe takes 64 KiB.
		w := bufio.NewWriterSize(stdout, 1<<20)
		if err := d.Snapshot(ctx, w); err != nil {
			return err
		}
		return w.Flush()
	case "quorum":
		v, err := d.Quorum(ctx)
		if err != nil {
			return err
		}
		return writeJSON(stdout, v)
	case "restore":
		c, err := restoreFlags(rest)
		if err != nil {
			return err
		}
		return d.Restore(ctx, c)
	default:
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
}

func restoreFlags(args []string) (etcd.RestoreConfig, error) {
	var c etcd.RestoreConfig
	var peers string
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.SnapshotPath, "snapshot", "", "Snapshot file.")
	fs.StringVar(&c.DataDir, "data-dir", "", "Data directory to create.")
	fs.StringVar(&c.Name, "name", "", "Member name.")
	fs.StringVar(&peers, "initial-advertise-peer-urls", "", "Comma-separated peer URLs of the member.")
	fs.StringVar(&c.InitialCluster, "initial-cluster", "", "name=peerURL,... of the restored cluster.")
	fs.StringVar(&c.InitialClusterToken, "initial-cluster-token", "", "Cluster token.")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("%w: restore: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: restore takes no arguments, got %q", errUsage, fs.Args())
	}
	c.PeerURLs = splitList(peers)
	for _, req := range []struct{ flag, v string }{{"snapshot", c.SnapshotPath}, {"data-dir", c.DataDir}, {"name", c.Name}, {"initial-cluster", c.InitialCluster}} {
		if req.v == "" {
			return c, fmt.Errorf("%w: restore needs --%s", errUsage, req.flag)
		}
	}
	if len(c.PeerURLs) == 0 {
		return c, fmt.Errorf("%w: restore needs --initial-advertise-peer-urls", errUsage)
	}
	return c, nil
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
