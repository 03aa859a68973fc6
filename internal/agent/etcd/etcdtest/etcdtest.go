// Package etcdtest starts real etcd processes (the repository's bin/etcd, built by
// `make tools`) on loopback ports for tests, and plays the kubelet for an etcd
// static pod manifest: it runs the member while the manifest is in place and stops
// it when the manifest is moved away. Test code only.
//
// Helper builds the etcd helper binary (cmd/capi-inplace-etcd) that etcd.Local runs.
//
// Imports: internal/agent/etcd (ParseManifest, HelperName),
// internal/agent/helperbin/helperbintest (the helper's build), the standard library.
package etcdtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/etcd"
	"github.com/capi-inplace/capi-inplace/internal/freeport"
)

// Binary returns the etcd binary: $ETCD_BIN, <repo>/bin/etcd, or etcd on PATH. It
// skips the test when there is none outside CI and fails it in CI. It must run on
// the test's goroutine (NewMember calls it): a skip anywhere else cannot end the
// test and left Kubelet's cleanup waiting forever.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ETCD_BIN"); p != "" {
		if isFile(p) {
			return p
		}
		return noBinary(t, "ETCD_BIN="+p+" is not a file")
	}
	if dir, err := os.Getwd(); err == nil {
		for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				if p := filepath.Join(dir, "bin", "etcd"); isFile(p) {
					return p
				}
				break
			}
		}
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	return noBinary(t, "no bin/etcd and no etcd on PATH")
}

func noBinary(t testing.TB, why string) string {
	t.Helper()
	if os.Getenv("CI") == "" {
		t.Skipf("no etcd binary (%s): run `make tools` (bin/etcd)", why)
	}
	t.Fatalf("no etcd binary in CI (%s): `make tools` must build bin/etcd", why)
	return ""
}

func isFile(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular()
}

// Ports returns n free loopback TCP ports, none returned before in this process
// (freeport.Ports).
func Ports(t testing.TB, n int) []int {
	t.Helper()
	p, err := freeport.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Member is one etcd process definition.
type Member struct {
	Name      string
	DataDir   string
	ClientURL string
	PeerURL   string
	// Extra flags, e.g. --initial-cluster-state=existing.
	Extra []string
	// InitialCluster is the --initial-cluster value.
	InitialCluster string

	bin string // resolved by NewMember, on the test's goroutine

	mu  sync.Mutex
	cmd *exec.Cmd
	log *os.File
}

// NewMember defines a member on fresh loopback ports with its data under dir.
// It skips (or, in CI, fails) the test right away when there is no etcd binary.
func NewMember(t testing.TB, dir, name string) *Member {
	t.Helper()
	bin := Binary(t)
	p := Ports(t, 2)
	m := &Member{Name: name, DataDir: filepath.Join(dir, name+".etcd"), bin: bin,
		ClientURL: fmt.Sprintf("http://127.0.0.1:%d", p[0]), PeerURL: fmt.Sprintf("http://127.0.0.1:%d", p[1])}
	m.InitialCluster = m.Name + "=" + m.PeerURL
	f, err := os.Create(filepath.Join(t.TempDir(), m.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	m.log = f
	t.Cleanup(func() {
		m.Stop()
		if t.Failed() {
			b, _ := os.ReadFile(f.Name())
			t.Logf("etcd %s log (tail):\n%s", m.Name, tail(string(b), 3000))
		}
		_ = f.Close()
	})
	return m
}

// Args are the member's etcd flags, as a kubeadm manifest would list them.
func (m *Member) Args() []string {
	return append([]string{
		"--name=" + m.Name, "--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.PeerURL, "--initial-advertise-peer-urls=" + m.PeerURL,
		"--initial-cluster=" + m.InitialCluster,
	}, m.Extra...)
}

// Start runs the member with its Args and stops it at the end of the test.
func (m *Member) Start(t testing.TB) {
	t.Helper()
	m.StartArgs(t, m.Args())
}

// StartArgs runs etcd with args (the member's own unless the caller rewrote them).
func (m *Member) StartArgs(t testing.TB, args []string) {
	t.Helper()
	if err := m.startArgs(args); err != nil {
		t.Fatal(err)
	}
}

// startArgs is StartArgs without the test: safe on any goroutine.
func (m *Member) startArgs(args []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return nil
	}
	cmd := exec.Command(m.bin, args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd %s: %w", m.Name, err)
	}
	m.cmd = cmd
	return nil
}

// Stop ends the member's process and waits for it to exit.
func (m *Member) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
	m.cmd = nil
}

// Running reports whether the member's process runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// Cluster defines and starts n members bootstrapped together.
func Cluster(t testing.TB, n int) []*Member {
	t.Helper()
	dir := t.TempDir()
	var ms []*Member
	var initial []string
	for i := range n {
		m := NewMember(t, dir, fmt.Sprintf("m%d", i))
		ms = append(ms, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	for _, m := range ms {
		m.InitialCluster = strings.Join(initial, ",")
		m.Start(t)
	}
	return ms
}

// Kubelet runs the etcd static pod of a host root the way the kubelet does: while
// <root>/etc/kubernetes/manifests/etcd.yaml exists the member runs with the
// manifest's flags (host paths in --data-dir are taken inside root); when it is
// moved away the member is stopped. It polls until the test ends.
func Kubelet(t testing.TB, root string, m *Member) {
	t.Helper()
	manifest := filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml")
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done; m.Stop() })
	sync := func() {
		raw, err := os.ReadFile(manifest)
		if err != nil {
			m.Stop()
			return
		}
		if m.Running() {
			return
		}
		cfg, err := etcd.ParseManifest(raw)
		if err != nil {
			t.Errorf("kubelet: %v", err)
			return
		}
		var args []string
		for _, f := range cfg.Flags {
			if f.Name == "data-dir" {
				f.Value = filepath.Join(root, f.Value)
			}
			args = append(args, "--"+f.Name+"="+f.Value)
		}
		if err := m.startArgs(args); err != nil {
			t.Errorf("kubelet: %v", err)
		}
	}
	sync()
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				sync()
			}
		}
	}()
}

// Manifest renders a kubeadm-like etcd static pod manifest for m with the host
// data directory dataDir.
func Manifest(m *Member, dataDir string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\nspec:\n  containers:\n  - name: etcd\n    image: registry.k8s.io/etcd:3.6.8-0\n    command:\n    - etcd\n")
	for _, a := range m.Args() {
		if strings.HasPrefix(a, "--data-dir=") {
			a = "--data-dir=" + dataDir
		}
		fmt.Fprintf(&b, "    - %s\n", a)
	}
	return []byte(b.String())
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
