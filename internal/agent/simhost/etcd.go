package simhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
)

// Etcd returns the simulated host's etcd member. A real kubeadm host has no
// etcdctl or etcdutl, so the simulated one has none either (the runner answers
// "command not found"); the agent reaches etcd through etcd.Member, which this
// emulates on the host directory:
//   - the member runs while <root>/etc/kubernetes/manifests/etcd.yaml exists (the
//     kubelet's static pod), and its data is <root>/var/lib/etcd/member/snap/db;
//   - the cluster has as many members as <root>/.sim/etcd-members says (default 1);
//   - a restore writes the snapshot and the identity it was restored as
//     (member/sim-identity: name, peer URLs, initial cluster, token).
func (h *Host) Etcd() etcd.Member { return simEtcd{h: h} }

type simEtcd struct{ h *Host }

var _ etcd.Member = simEtcd{}

func (e simEtcd) db() string { return e.h.path("var/lib/etcd/member/snap/db") }

func (e simEtcd) running() error {
	if _, err := os.Stat(e.h.path("etc/kubernetes/manifests/etcd.yaml")); err != nil {
		return errors.New("dial tcp 127.0.0.1:2379: connect: connection refused")
	}
	if _, err := os.Stat(e.db()); err != nil {
		return errors.New("dial tcp 127.0.0.1:2379: connect: connection refused")
	}
	return nil
}

// EtcdMembers is the simulated cluster's member count.
func (h *Host) EtcdMembers() int {
	if n, err := strconv.Atoi(h.readTrim(h.simPath("etcd-members"))); err == nil && n > 0 {
		return n
	}
	return 1
}

// SetEtcdMembers makes the simulated cluster have n members.
func (h *Host) SetEtcdMembers(n int) error {
	return writeFile(h.simPath("etcd-members"), []byte(strconv.Itoa(n)+"\n"))
}

func (e simEtcd) Status(context.Context) (etcd.Status, error) {
	if err := e.running(); err != nil {
		return etcd.Status{}, err
	}
	info, err := os.Stat(e.db())
	if err != nil {
		return etcd.Status{}, err
	}
	st := etcd.Status{ClusterID: 0x5157, MemberID: 1, DBSize: info.Size()}
	for i := range e.h.EtcdMembers() {
		name := e.h.NodeName
		if i > 0 {
			name = fmt.Sprintf("peer-%d", i)
		}
		st.Members = append(st.Members, etcd.MemberInfo{ID: uint64(i + 1), Name: name, PeerURLs: []string{fmt.Sprintf("https://%s:2380", name)}})
	}
	return st, nil
}

func (e simEtcd) Healthy(context.Context) error {
	if err := e.running(); err != nil {
		return fmt.Errorf("https://127.0.0.1:2379 is unhealthy: %w", err)
	}
	return nil
}

func (e simEtcd) Snapshot(_ context.Context, w io.Writer) error {
	if err := e.running(); err != nil {
		return err
	}
	data, err := os.ReadFile(e.db())
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

func (e simEtcd) Restore(_ context.Context, c etcd.RestoreConfig) error {
	if _, err := os.Stat(c.DataDir); err == nil {
		return fmt.Errorf("etcd restore: %s already exists", c.DataDir)
	}
	data, err := os.ReadFile(c.SnapshotPath)
	if err != nil {
		return fmt.Errorf("etcd restore: %w", err)
	}
	id := fmt.Sprintf("name=%s\npeer-urls=%s\ninitial-cluster=%s\ntoken=%s\n", c.Name, strings.Join(c.PeerURLs, ","), c.InitialCluster, c.InitialClusterToken)
	if err := writeFile(filepath.Join(c.DataDir, "member/snap/db"), data); err != nil {
		return err
	}
	return writeFile(filepath.Join(c.DataDir, "member/sim-identity"), []byte(id))
}

// Stopped: the simulated kubelet stops the member as soon as its manifest is gone.
func (e simEtcd) Stopped(context.Context, string) (bool, error) {
	_, err := os.Stat(e.h.path("etc/kubernetes/manifests/etcd.yaml"))
	return errors.Is(err, os.ErrNotExist), nil
}

// etcdManifest is the etcd static pod manifest kubeadm init writes for a node.
func etcdManifest(node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.8-0
    command:
    - etcd
    - --advertise-client-urls=https://%[1]s:2379
    - --data-dir=/var/lib/etcd
    - --initial-advertise-peer-urls=https://%[1]s:2380
    - --initial-cluster=%[1]s=https://%[1]s:2380
    - --listen-client-urls=https://127.0.0.1:2379
    - --name=%[1]s
`, node)
}
