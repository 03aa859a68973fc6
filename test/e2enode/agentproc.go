//go:build e2enode

package e2enode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inplacev1 "github.com/capi-inplace/capi-inplace/api/v1alpha1"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// The agent's files on the node (internal/agent/kube.WorkDir; the journal is the
// agent's --state-dir default).
const (
	agentWorkDir = "/var/lib/capi-inplace"
	agentJournal = agentWorkDir + "/journal.json"
)

// agentPID finds the node's agent process from the host: the lane's nodes share the
// host's PID namespace, and every process of a node's pods runs in the node's cgroup
// (realnode-<node>). 0 when there is none.
func agentPID(n Node) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err := os.ReadFile(p + "/cmdline")
		if err != nil || !bytes.HasPrefix(cmd, []byte("/capi-inplace-agent\x00agent")) {
			continue
		}
		cg, err := os.ReadFile(p + "/cgroup")
		if err != nil || !bytes.Contains(cg, []byte("/realnode-"+n.Name+"/")) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(p))
		if err == nil {
			return pid
		}
	}
	return 0
}

// agentRSS reads the agent process's resident memory from /proc/<pid>/status on
// the host: VmRSS (now), RssAnon (its heap and stacks, without mapped files) and
// VmHWM (peak). The pod's memory cgroup also counts kubeadm, its other children and
// the page cache of the binaries it downloaded.
func agentRSS(n Node) string {
	pid := agentPID(n)
	if pid == 0 {
		return "agent process not found"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	mib := func(k string) string {
		kb, err := strconv.ParseInt(strings.TrimSuffix(fields[k], " kB"), 10, 64)
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
	}
	return fmt.Sprintf("VmRSS %s, RssAnon %s, VmHWM %s", mib("VmRSS"), mib("RssAnon"), mib("VmHWM"))
}

func readJournal(ctx context.Context, n Node) (lanekit.Journal, error) {
	out, err := lane.Exec(ctx, n, "cat", agentJournal)
	if err != nil {
		return lanekit.Journal{}, err
	}
	j, err := lanekit.ParseJournal([]byte(out))
	if err != nil {
		return lanekit.Journal{}, fmt.Errorf("%s: %w", n.Name, err)
	}
	return j, nil
}

// JournalWatch reads the agent's journal on the node every second and records when
// each action was in flight: the agent's own steps, timed on the node.
type JournalWatch struct {
	mu       sync.Mutex
	spans    []span
	onChange func(lanekit.Journal)
	stop     chan struct{}
	finished chan struct{}
}

type span struct {
	action   string
	from, to time.Time
}

// WatchJournal starts watching; onChange (may be nil) is called with every entry
// whose in-flight action differs from the previous one.
func WatchJournal(n Node, onChange func(lanekit.Journal)) *JournalWatch {
	w := &JournalWatch{onChange: onChange, stop: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		last := "\x00"
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			e, err := readJournal(ctx, n)
			cancel()
			if err == nil && e.InFlight != last {
				now := time.Now()
				w.mu.Lock()
				if k := len(w.spans); k > 0 && w.spans[k-1].to.IsZero() {
					w.spans[k-1].to = now
				}
				if e.InFlight != "" {
					w.spans = append(w.spans, span{action: e.InFlight, from: now})
				}
				w.mu.Unlock()
				last = e.InFlight
				if w.onChange != nil {
					w.onChange(e)
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

// Stop ends the watch and returns, per action (rollback actions as rollback/<name>),
// the time it was seen in flight, summed over its runs, in the order first seen.
func (w *JournalWatch) Stop() string {
	close(w.stop)
	<-w.finished
	w.mu.Lock()
	defer w.mu.Unlock()
	total := map[string]time.Duration{}
	var order []string
	for _, s := range w.spans {
		to := s.to
		if to.IsZero() {
			to = time.Now()
		}
		if _, ok := total[s.action]; !ok {
			order = append(order, s.action)
		}
		total[s.action] += to.Sub(s.from)
	}
	parts := make([]string, 0, len(order))
	for _, a := range order {
		parts = append(parts, fmt.Sprintf("%s %s", a, total[a].Round(time.Second)))
	}
	if len(parts) == 0 {
		return "no action seen in flight"
	}
	return strings.Join(parts, ", ")
}

// nodeState is what the lane compares on a node before an update and after its
// rollback: binaries by digest, static pod manifests, the kubelet's configuration
// and the files the plan writes.
type nodeState map[string]string

var rollbackPaths = []string{
	"/usr/bin/kubeadm", "/usr/bin/kubelet",
	"/etc/kubernetes/manifests/kube-apiserver.yaml", "/etc/kubernetes/manifests/kube-controller-manager.yaml",
	"/etc/kubernetes/manifests/kube-scheduler.yaml", "/etc/kubernetes/manifests/etcd.yaml",
	"/var/lib/kubelet/config.yaml", "/var/lib/kubelet/kubeadm-flags.env", "/var/lib/kubelet/instance-config.yaml",
	"/etc/realnode/cp.conf", "/etc/realnode/cp-new.conf",
}

// readNodeState reads rollbackPaths on the node: sha256 of each file, or "absent".
func readNodeState(t *testing.T, n Node) nodeState {
	t.Helper()
	script := `for f in "$@"; do if [ -e "$f" ]; then echo "$f $(sha256sum <"$f" | cut -c1-64)"; else echo "$f absent"; fi; done`
	out := lane.MustExec(t, n, append([]string{"sh", "-c", script, "sh"}, rollbackPaths...)...)
	st := nodeState{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if p, d, ok := strings.Cut(l, " "); ok {
			st[p] = d
		}
	}
	return st
}

// diff lists the paths whose state differs.
func (s nodeState) diff(o nodeState) []string {
	var out []string
	for p, d := range s {
		if o[p] != d {
			out = append(out, fmt.Sprintf("%s: %s -> %s", p, d, o[p]))
		}
	}
	sort.Strings(out)
	return out
}

// listPrefixed lists the names in dir on the node that start with prefix.
func listPrefixed(t *testing.T, n Node, dir, prefix string) []string {
	t.Helper()
	out, err := lane.Exec(context.Background(), n, "ls", dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range strings.Fields(out) {
		if strings.HasPrefix(l, prefix) {
			names = append(names, l)
		}
	}
	return names
}

// The control plane's pool gate in the lane's policy: it passes once the file
// exists on the node; the failure round runs without it.
const (
	laneGate    = "lane-health"
	healthyFile = "/etc/realnode/healthy"
)

// statusCLI runs the real `capi-inplace status` against the management cluster and
// returns its JSON output and exit code.
func statusCLI(t *testing.T, kubeconfig string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin("capi-inplace"), "status", clusterName, "-n", namespace, "-o", "json", "--kubeconfig", kubeconfig)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("capi-inplace status: %v: %s", err, stderr.String())
	}
	// Indented, so that tests can match `"phase": "RolledBack"`.
	var doc any
	if json.Unmarshal(stdout.Bytes(), &doc) == nil {
		if b, err := json.MarshalIndent(doc, "", "  "); err == nil {
			return string(b), code
		}
	}
	return stdout.String() + stderr.String(), code
}

// retryFailedPlan asks for a retry of the node's failed update as an operator does,
// with the retry annotation on the Machine, and drives the hook until the
// coordinator says it withdrew the plan; then the agent on the node must forget
// the failed plan (its journal no longer holds it), so that the next update starts
// afresh.
func retryFailedPlan(ctx context.Context, t *testing.T, mc *MachineController, n Node) {
	t.Helper()
	g := newG(t)
	m := &clusterv1.Machine{}
	g.Expect(mc.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: n.Name}, m)).To(Succeed())
	base := m.DeepCopy()
	setAnnotation(m, inplacev1.RetryAnnotation, "lane")
	g.Expect(mc.Mgmt.Client.Patch(ctx, m, client.MergeFrom(base))).To(Succeed())
	res, err := mc.Update(ctx, n.Name, Change{}, 5*time.Minute, func(c HookCall) bool {
		return strings.Contains(c.Message, "retrying node "+n.Name)
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Calls[len(res.Calls)-1].Message).To(ContainSubstring("was withdrawn"))
	g.Eventually(func() error {
		return mc.Mgmt.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: n.Name}, m)
	}).Should(Succeed())
	g.Expect(m.Annotations).NotTo(HaveKey(inplacev1.RetryAnnotation), "the coordinator removes the retry annotation")
	g.Eventually(func() string {
		e, err := readJournal(ctx, n)
		if err != nil {
			return err.Error()
		}
		return e.Key + e.State.Phase
	}, 2*time.Minute, time.Second).Should(BeEmpty(), "the agent forgets the withdrawn failed plan")
}
