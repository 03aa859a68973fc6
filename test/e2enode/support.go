//go:build e2enode

package e2enode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Outage records when the API server did not answer /readyz, probed every 250 ms.
type Outage struct {
	mu       sync.Mutex
	down     []window
	current  *window
	stop     chan struct{}
	finished chan struct{}
}

type window struct{ from, to time.Time }

// ProbeAPI starts probing; Stop ends it.
func ProbeAPI(cs kubernetes.Interface) *Outage {
	o := &Outage{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(o.finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			cancel()
			now := time.Now()
			o.mu.Lock()
			switch {
			case err != nil && o.current == nil:
				o.current = &window{from: now}
			case err == nil && o.current != nil:
				o.current.to = now
				o.down = append(o.down, *o.current)
				o.current = nil
			}
			o.mu.Unlock()
			select {
			case <-o.stop:
				return
			case <-t.C:
			}
		}
	}()
	return o
}

// Stop ends the probe and returns the total unavailable time and the longest window.
func (o *Outage) Stop() (total, longest time.Duration, windows int) {
	return o.StopSince(time.Time{})
}

// StopSince is Stop counting only the unavailable time after from (a window open
// at from counts from there).
func (o *Outage) StopSince(from time.Time) (total, longest time.Duration, windows int) {
	close(o.stop)
	<-o.finished
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.current != nil {
		o.current.to = time.Now()
		o.down = append(o.down, *o.current)
	}
	n := 0
	for _, w := range o.down {
		if !w.to.After(from) {
			continue
		}
		if w.from.Before(from) {
			w.from = from
		}
		n++
		d := w.to.Sub(w.from)
		total += d
		if d > longest {
			longest = d
		}
	}
	return total, longest, n
}

// Figures collects the lane's measurements for _artifacts/realnode/figures.md.
type Figures struct {
	mu   sync.Mutex
	rows [][2]string
}

// Add records one figure.
func (f *Figures) Add(name string, value any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var v string
	switch x := value.(type) {
	case time.Duration:
		v = x.Round(100 * time.Millisecond).String()
	default:
		v = fmt.Sprint(x)
	}
	f.rows = append(f.rows, [2]string{name, v})
}

// Write writes the figures as a Markdown table.
func (f *Figures) Write(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Real-node lane figures (%s)\n\n| measurement | value |\n| --- | --- |\n", time.Now().UTC().Format(time.RFC3339))
	for _, r := range f.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// ArtifactServer serves the lane's Kubernetes binaries over HTTP on the host's lane
// address, as an operator's artifact mirror would; content is verified by digest.
type ArtifactServer struct {
	URL string
	srv *http.Server
}

// ServeArtifacts serves dir on addr (host:0 picks a port).
func ServeArtifacts(addr, dir string) (*ArtifactServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	s := &ArtifactServer{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *ArtifactServer) Close() { _ = s.srv.Close() }

// sha256File returns the hex sha256 of a file.
func sha256File(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// CordonWatch records when a Node was cordoned and uncordoned, polled every 500 ms.
type CordonWatch struct {
	mu                   sync.Mutex
	cordoned, uncordoned time.Time
	stop, finished       chan struct{}
}

// WatchCordon starts watching node's spec.unschedulable.
func WatchCordon(cs kubernetes.Interface, node string) *CordonWatch {
	return WatchCordonThen(cs, node, nil)
}

// WatchCordonThen is WatchCordon that runs onCordon (in the watch, before the next
// poll) when it first sees the node cordoned, with the Node as seen then.
func WatchCordonThen(cs kubernetes.Interface, node string, onCordon func(*corev1.Node)) *CordonWatch {
	w := &CordonWatch{stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			cancel()
			if err == nil {
				now := time.Now()
				w.mu.Lock()
				switch {
				case n.Spec.Unschedulable && w.cordoned.IsZero():
					w.cordoned = now
					if onCordon != nil {
						onCordon(n)
					}
				case !n.Spec.Unschedulable && !w.cordoned.IsZero() && w.uncordoned.IsZero():
					w.uncordoned = now
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return w
}

// Stop ends the watch and returns the cordon-to-uncordon window (to now if the node
// is still cordoned; 0 if it never was).
func (w *CordonWatch) Stop() time.Duration {
	close(w.stop)
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cordoned.IsZero() {
		return 0
	}
	end := w.uncordoned
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(w.cordoned)
}

// Uncordoned is when the node was seen uncordoned after the cordon.
func (w *CordonWatch) Uncordoned() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.uncordoned
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// processCmdline returns the command line of the node's process named name ("" if none).
func processCmdline(t *testing.T, n Node, name string) string {
	t.Helper()
	out, err := lane.Exec(context.Background(), n, "sh", "-c", "for p in $(pgrep -x "+name+"); do tr '\\0' ' ' </proc/$p/cmdline; echo; done")
	if err != nil {
		return ""
	}
	return out
}

// kubeletCmdline returns the running kubelet's command line on the node.
func kubeletCmdline(t *testing.T, n Node) string {
	t.Helper()
	pid := strings.TrimSpace(lane.MustExec(t, n, "cat", "/run/realnode-kubelet/pid"))
	return strings.ReplaceAll(lane.MustExec(t, n, "cat", "/proc/"+pid+"/cmdline"), "\x00", " ")
}

// agentMemory reads the agent pod's memory cgroup on the node (usage and peak).
func agentMemory(t *testing.T, c *Cluster, n Node) string {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("capi-inplace-system").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil || len(pods.Items) == 0 {
		return fmt.Sprintf("no agent pod (%v)", err)
	}
	uid := string(pods.Items[0].UID)
	dirs, _ := filepath.Glob("/sys/fs/cgroup/memory/realnode-" + n.Name + "/kubepods/*/pod" + uid)
	more, _ := filepath.Glob("/sys/fs/cgroup/memory/realnode-" + n.Name + "/kubepods/pod" + uid)
	dirs = append(dirs, more...)
	if len(dirs) == 0 {
		return "agent pod cgroup not found"
	}
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dirs[0], f))
		if err != nil {
			return "?"
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20))
	}
	return read("memory.usage_in_bytes") + " / " + read("memory.max_usage_in_bytes")
}
