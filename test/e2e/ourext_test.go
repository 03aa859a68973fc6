//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
)

// ours is our extension process, started once for the whole test binary and
// registered twice: "capi-inplace" for namespaces labelled extOurs and
// "capi-inplace-disabled" (settings disableInPlaceUpdates=true) for extOursDisabled.
var ours struct {
	once sync.Once
	ext  *localstack.Extension
	err  error
}

// requireBinary fails the test unless bin/capi-inplace has the extension and
// bin/capi-inplace-dev the simulated agent (they are built by `make build`; the e2e
// target depends on it).
func requireBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(suite.stack.BinDir(), "capi-inplace")
	for _, c := range []struct {
		bin  string
		args []string
		want string
	}{
		{bin, []string{"extension", "--help"}, "--manage-agents"},
		{filepath.Join(suite.stack.BinDir(), localstack.AgentBinary), []string{"agent", "--help"}, "--simulate"},
	} {
		out, err := exec.Command(c.bin, c.args...).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(c.want)) {
			t.Fatalf("%s %s does not offer %s yet (err %v): build it with `make build` once the extension and agent have landed\n%s",
				c.bin, strings.Join(c.args, " "), c.want, err, out)
		}
	}
	return bin
}

// ourExtension starts (once) and returns our extension.
func ourExtension(t *testing.T) *localstack.Extension {
	t.Helper()
	requireBinary(t)
	ours.once.Do(func() {
		spec, err := withE2EPolicy(localstack.OurExtension(suite.stack.BinDir(), "capi-inplace", map[string]string{extensionLabel: extOurs}, nil))
		if err != nil {
			ours.err = err
			return
		}
		ours.ext, ours.err = suite.stack.StartExtension(suite.ctx, spec)
		if ours.err != nil {
			return
		}
		ours.err = suite.stack.RegisterExtension(suite.ctx, ours.ext, "capi-inplace-disabled",
			map[string]string{extensionLabel: extOursDisabled}, map[string]string{"disableInPlaceUpdates": "true"})
	})
	if ours.err != nil {
		t.Fatalf("start our extension: %v", ours.err)
	}
	return ours.ext
}

// startAgents starts one simulated agent per Node and waits until every node of the
// cluster has one.
func (s *scenario) startAgents(cluster string, want int) *localstack.Agents {
	s.t.Helper()
	return s.startAgentsWith(cluster, want, localstack.AgentOptions{})
}

// startAgentsWith is startAgents with agent options (e.g. a short gate time-out).
func (s *scenario) startAgentsWith(cluster string, want int, opts localstack.AgentOptions) *localstack.Agents {
	s.t.Helper()
	a, err := s.stack.StartAgents(s.ctx, s.ns, cluster, opts)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(a.Stop)
	s.eventually(time.Minute, "an agent per node", func() error {
		if errs := a.Errors(); len(errs) > 0 {
			return fmt.Errorf("agents: %v", errs)
		}
		if n := len(a.Nodes()); n != want {
			return fmt.Errorf("%d agents, want %d", n, want)
		}
		for _, n := range a.Nodes() {
			if exited, err := a.Process(n).Exited(); exited {
				return fmt.Errorf("agent of %s exited: %w (log %s)", n, err, a.Process(n).LogPath)
			}
		}
		return nil
	})
	s.logf("agents running for nodes %v", a.Nodes())
	return a
}

// hostFile reads a file from a node's simulated host.
func hostFile(a *localstack.Agents, node, path string) (string, error) {
	b, err := os.ReadFile(filepath.Join(a.HostRoot(node), path))
	return string(b), err
}

// writeHostFile writes a file into a node's simulated host (fault injection).
func writeHostFile(a *localstack.Agents, node, path, content string) error {
	p := filepath.Join(a.HostRoot(node), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

// nodesAt checks that every Node reports version.
func (s *scenario) nodesAt(kubeconfig, version string) func() error {
	wc := s.workloadClient(kubeconfig)
	return func() error {
		vs, err := s.nodeVersions(wc)
		if err != nil {
			return err
		}
		for n, v := range vs {
			if v != version {
				return fmt.Errorf("node %s reports kubelet %s, want %s", n, v, version)
			}
		}
		return nil
	}
}

// hostsHave checks that every simulated host has file with its content.
func hostsHave(a *localstack.Agents, file localstack.File) func() error {
	return func() error {
		for _, n := range a.Nodes() {
			got, err := hostFile(a, n, file.Path)
			if err != nil {
				return fmt.Errorf("host %s: %w", n, err)
			}
			if got != file.Content {
				return fmt.Errorf("host %s: %s is %q, want %q", n, file.Path, got, file.Content)
			}
		}
		return nil
	}
}

// countCommands returns, per node, how many lines of the simulated host's
// commands.log contain substr.
func countCommands(a *localstack.Agents, substr string) map[string]int {
	out := map[string]int{}
	for _, n := range a.Nodes() {
		b, _ := os.ReadFile(filepath.Join(a.HostRoot(n), ".sim", "commands.log"))
		out[n] = strings.Count(string(b), substr)
	}
	return out
}
