package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	securejoin "github.com/cyphar/filepath-securejoin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/capi-inplace/capi-inplace/internal/agent/service"
	"github.com/capi-inplace/capi-inplace/internal/backend"
)

// HostRunner runs commands on the host: directly when the host root is "/", and
// chrooted into the host root otherwise (the DaemonSet mounts the host's / at
// /host), so kubeadm and the service manager's commands are the host's own. The chroot is a
// process attribute, so the agent's image needs no chroot binary.
type HostRunner struct {
	Root string
	// Exec runs commands when Root is "/" (backend.ExecRunner).
	Exec backend.Runner
}

// Run implements backend.Runner.
func (r HostRunner) Run(ctx context.Context, c backend.Command) (backend.Result, error) {
	if r.Root == "" || r.Root == "/" {
		return r.Exec.Run(ctx, c)
	}
	path, err := r.lookPath(c.Name)
	if err != nil {
		return backend.Result{ExitCode: -1}, &backend.CommandError{Command: c, Err: err}
	}
	cmd := exec.CommandContext(ctx, path, c.Args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: r.Root}
	cmd.Dir = "/"
	if c.Dir != "" {
		cmd.Dir = c.Dir
	}
	// The host's PATH, not the container's.
	cmd.Env = append([]string{"PATH=" + strings.Join(hostPATH, ":")}, c.Env...)
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	output := c.Capture(cmd)
	err = cmd.Run()
	stdout, stderr := output()
	res := backend.Result{Stdout: stdout, Stderr: stderr, ExitCode: cmd.ProcessState.ExitCode()}
	if err != nil {
		return res, &backend.CommandError{Command: c, Result: res, Err: err}
	}
	return res, nil
}

// hostPATH is the search path of commands on the host.
var hostPATH = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// lookPath finds a command by name on the host's PATH inside the host root. The
// lookup must happen here: os/exec resolves a bare name in the agent's own file
// system before the child chroots, where the host's kubeadm or systemctl is not
// (seen on a real node: `exec: "kubeadm": executable file not found in $PATH`).
// Symlinks resolve inside the host root, as they would on the host.
func (r HostRunner) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range hostPATH {
		p := filepath.Join(dir, name)
		inRoot, err := securejoin.SecureJoin(r.Root, p)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(inRoot); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on the host's PATH (%s) under %s", name, strings.Join(hostPATH, ":"), r.Root)
}

// Rebooter reboots the real host through its service manager.
type Rebooter struct {
	Services service.Manager
}

// Reboot implements executor.Rebooter; it returns once the service manager
// accepted the request, and the executor then waits to be stopped by the shutdown.
func (r Rebooter) Reboot(ctx context.Context) error {
	if err := r.Services.Reboot(ctx); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return nil
}

// BootID implements executor.Rebooter with the kernel's boot ID, which is the
// same inside and outside containers.
func (r Rebooter) BootID(context.Context) (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot ID: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// NodeReader reads the agent's own Node and mirror pods for the gates.
type NodeReader struct {
	Client   kubernetes.Interface
	NodeName string
}

// Node implements gate.NodeReader.
func (r NodeReader) Node(ctx context.Context) (*corev1.Node, error) {
	n, err := r.Client.CoreV1().Nodes().Get(ctx, r.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", r.NodeName, err)
	}
	return n, nil
}

// Pod implements gate.NodeReader.
func (r NodeReader) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := r.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return p, nil
}
