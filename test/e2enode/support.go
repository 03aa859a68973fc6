//go:build e2enode

package e2enode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
