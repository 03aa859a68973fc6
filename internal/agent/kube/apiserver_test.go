package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/agent/etcd/etcdtest"
	"github.com/capi-inplace/capi-inplace/internal/backend/backendtest"
)

func TestAPIServerAddress(t *testing.T) {
	pod := func(args string) string {
		return "spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver" + args + "]\n"
	}
	tests := []struct {
		name, manifest, want, err string
	}{
		{"kubeadm's defaults", pod(", --advertise-address=10.0.0.5"), "127.0.0.1:6443", ""},
		{"secure port", pod(", --secure-port=16443"), "127.0.0.1:16443", ""},
		{"bind address", pod(", --bind-address=10.0.0.5, --secure-port=6444"), "10.0.0.5:6444", ""},
		{"unspecified bind address", pod(", --bind-address=0.0.0.0"), "127.0.0.1:6443", ""},
		{"unspecified IPv6 bind address", pod(", --bind-address=::"), "127.0.0.1:6443", ""},
		{"IPv6 bind address", pod(", --bind-address=fd00::5"), "[fd00::5]:6443", ""},
		{"not a port", pod(", --secure-port=http"), "", "is not a port"},
		{"no such container", "spec:\n  containers:\n  - name: etcd\n", "", "no container named kube-apiserver"},
		{"not YAML", "spec: [", "", "kube-apiserver manifest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := apiServerAddress([]byte(tt.manifest))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("apiServerAddress() = %q, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("apiServerAddress() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// apiServerKubelet plays the kubelet for a kube-apiserver manifest: while the
// manifest is in the manifest directory something listens on its port (the API
// server), and it stops listening once the manifest is gone.
func apiServerKubelet(t *testing.T, root string, port int) (listeningNow func() bool) {
	t.Helper()
	manifest := filepath.Join(root, APIServerManifest)
	var mu sync.Mutex
	var l net.Listener
	stop, done := make(chan struct{}), make(chan struct{})
	reconcile := func() {
		mu.Lock()
		defer mu.Unlock()
		_, err := os.Stat(manifest)
		switch {
		case err == nil && l == nil:
			if l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
				l = nil
				return
			}
			go func(l net.Listener) {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_ = c.Close()
				}
			}(l)
		case err != nil && l != nil:
			_ = l.Close()
			l = nil
		}
	}
	go func() {
		defer close(done)
		for {
			reconcile()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if l != nil {
			_ = l.Close()
		}
	})
	return func() bool { return listening(context.Background(), fmt.Sprintf("127.0.0.1:%d", port)) }
}

// restoreObserver records what the node looked like when the member's restore ran.
type restoreObserver struct {
	etcd.Member
	observe func()
}

func (r *restoreObserver) Restore(ctx context.Context, c etcd.RestoreConfig) error {
	r.observe()
	return r.Member.Restore(ctx, c)
}

// TestRestoreEtcdStopsTheAPIServerFirst: the etcd restore runs only once the
// node's kube-apiserver is stopped (its manifest out of the manifest directory,
// nothing serving its port), as Kubernetes documents for a restore; afterwards
// the same manifest is back and the API server serves again. Before, the restore
// ran under the running API server (on the real node, the upgraded one held its
// port across the restore while the restored one crash-looped for a minute).
func TestRestoreEtcdStopsTheAPIServerFirst(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := t.TempDir()
	m := etcdtest.NewMember(t, t.TempDir(), "cp-1")
	write(t, root, EtcdManifest, string(etcdtest.Manifest(m, EtcdDataDir)), 0o600)
	etcdtest.Kubelet(t, root, m)
	port := etcdtest.Ports(t, 1)[0]
	apiManifest := fmt.Sprintf("spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --bind-address=127.0.0.1, --secure-port=%d]\n", port)
	write(t, root, APIServerManifest, apiManifest, 0o600)
	apiListening := apiServerKubelet(t, root, port)
	g.Eventually(apiListening, 10*time.Second, 50*time.Millisecond).Should(BeTrue())

	var atRestore struct {
		manifest  string
		listening bool
		calls     int
	}
	member := &restoreObserver{Member: &etcd.Local{Endpoints: []string{m.ClientURL}, Helper: etcdtest.Helper(t), RequestTimeout: 2 * time.Second}, observe: func() {
		atRestore.calls++
		atRestore.manifest = read(t, root, APIServerManifest)
		atRestore.listening = apiListening()
	}}
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: member}
	g.Eventually(func() error { return h.EtcdHealthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	_, err := h.EtcdSnapshot(ctx, "a1")
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(h.RestoreEtcd(ctx, "a1")).To(Succeed())
	g.Expect(atRestore.calls).To(Equal(1))
	g.Expect(atRestore.manifest).To(Equal("<missing>"), "the API server's manifest was out of the manifest directory during the restore")
	g.Expect(atRestore.listening).To(BeFalse(), "nothing served the API server's port during the restore")
	g.Expect(read(t, root, APIServerManifest)).To(Equal(apiManifest), "the same manifest is back")
	info, err := os.Stat(filepath.Join(root, APIServerManifest))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Eventually(apiListening, 10*time.Second, 50*time.Millisecond).Should(BeTrue(), "the API server runs again")
	g.Eventually(func() error { return h.EtcdHealthy(ctx) }, 30*time.Second, 200*time.Millisecond).Should(Succeed())

	// A repeat (crash before the result was journaled) leaves both running.
	g.Expect(h.RestoreEtcd(ctx, "a1")).To(Succeed())
	g.Expect(atRestore.calls).To(Equal(1), "the data was restored once")
	g.Expect(read(t, root, APIServerManifest)).To(Equal(apiManifest))
}

// TestRestoreEtcdWaitsForTheAPIServer: an API server that keeps serving after its
// manifest was moved away (a kubelet that does not act) holds the restore until
// APIServerStopTimeout; here the context ends first, the member is never touched
// and both manifests are back.
func TestRestoreEtcdWaitsForTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	apiManifest := fmt.Sprintf("spec:\n  containers:\n  - name: kube-apiserver\n    command: [kube-apiserver, --secure-port=%d]\n", l.Addr().(*net.TCPAddr).Port)
	etcdManifest := "spec:\n  containers:\n  - name: etcd\n    command: [etcd, --name=cp-1, --data-dir=/var/lib/etcd, --initial-advertise-peer-urls=https://10.0.0.5:2380]\n"
	write(t, root, APIServerManifest, apiManifest, 0o600)
	write(t, root, EtcdManifest, etcdManifest, 0o600)
	write(t, root, EtcdDataDir+"/member/snap/db", "current", 0o600)
	write(t, root, attemptDir("a1")+"/etcd-members.json", `{"members":[{"Name":"cp-1"}]}`, 0o600)
	restored := false
	h := &Host{Root: root, Runner: &backendtest.Runner{}, Etcd: &restoreObserver{Member: &failingRestore{}, observe: func() { restored = true }}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = h.RestoreEtcd(ctx, "a1")
	g.Expect(err).To(HaveOccurred())
	g.Expect(errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "still serves")).To(BeTrue(), "got %v", err)
	g.Expect(restored).To(BeFalse(), "no restore under a running API server")
	g.Expect(read(t, root, EtcdManifest)).To(Equal(etcdManifest))
	g.Expect(read(t, root, APIServerManifest)).To(Equal(apiManifest), "the API server's manifest is back")
	g.Expect(read(t, root, EtcdDataDir+"/member/snap/db")).To(Equal("current"))
}
