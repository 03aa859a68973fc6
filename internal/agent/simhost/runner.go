package simhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/backend"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Runner returns the backend.Runner of the simulated host: kubeadm, systemctl and
// the user tools are emulated inside the host directory, etcdctl and etcdutl are
// not found (as on a kubeadm host; etcd is reached through Etcd); any other command
// (user-defined gates) runs for real in the host directory with
// CAPI_INPLACE_HOST_ROOT set to it.
func (h *Host) Runner() backend.Runner { return runner{h: h} }

type runner struct{ h *Host }

// stagedDir is where the agent's staged files (protocol.ArtifactDir) are.
const stagedDir = "/var/lib/capi-inplace/artifacts/"

func (r runner) Run(ctx context.Context, c backend.Command) (backend.Result, error) {
	h := r.h
	h.logCommand(c)
	var out string
	var err error
	name := filepath.Base(c.Name)
	if strings.HasPrefix(c.Name, stagedDir) {
		// A staged kubeadm, run from the artifact store to pull images.
		name = "kubeadm"
	}
	switch name {
	case "kubeadm":
		out, err = h.kubeadm(ctx, c.Args)
	case "systemctl":
		out, err = h.systemctl(c.Args)
	case "etcdctl", "etcdutl":
		// A kubeadm host has none (they ship inside the etcd image): see Etcd.
		res := backend.Result{ExitCode: 127, Stderr: []byte(c.Name + ": command not found")}
		return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("exit status 127")}
	case "useradd", "usermod":
		out, err = h.user(filepath.Base(c.Name), c.Args)
	case "chpasswd":
		out, err = h.chpasswd(c.Args, c.Stdin)
	default:
		c.Dir = h.Root
		c.Env = append(c.Env, "CAPI_INPLACE_HOST_ROOT="+h.Root)
		return backend.ExecRunner{}.Run(ctx, c)
	}
	res := backend.Result{Stdout: []byte(out)}
	if err != nil {
		res.ExitCode, res.Stderr = 1, []byte(err.Error())
		return res, &backend.CommandError{Command: c, Result: res, Err: errors.New("exit status 1")}
	}
	return res, nil
}

func (h *Host) logCommand(c backend.Command) {
	f, err := os.OpenFile(h.simPath("commands.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = fmt.Fprintln(f, c.String())
}

func (h *Host) kubeadm(ctx context.Context, args []string) (string, error) {
	kubeadmVersion := h.BinaryVersion("kubeadm")
	switch {
	case len(args) >= 1 && args[0] == "version":
		return kubeadmVersion + "\n", nil
	case len(args) >= 5 && args[0] == "upgrade" && args[1] == "apply" && args[2] == "phase":
		// kubeadm 1.32+: one phase of the apply workflow. Only preflight is used.
		if args[3] != "preflight" {
			return "", fmt.Errorf("simulated kubeadm: unsupported phase %q", args[3])
		}
		return "", h.applyChecks(kubeadmVersion, args[4], args)
	case len(args) >= 3 && args[0] == "upgrade" && args[1] == "apply":
		if slices.Contains(args, "--skip-phases=preflight") {
			return h.upgrade(ctx, args[2])
		}
		if err := h.applyChecks(kubeadmVersion, args[2], args); err != nil {
			return "", err
		}
		return h.upgrade(ctx, args[2])
	case len(args) >= 3 && args[0] == "config" && args[1] == "images" && args[2] == "pull":
		// The simulated host has no container runtime: nothing to pull.
		return "", nil
	case len(args) >= 2 && args[0] == "upgrade" && args[1] == "node":
		if err := h.preflight(args, false); err != nil {
			return "", err
		}
		return h.upgrade(ctx, kubeadmVersion)
	}
	return "", fmt.Errorf("simulated kubeadm: unsupported arguments %q", strings.Join(args, " "))
}

// applyChecks is `kubeadm upgrade apply`'s preflight phase: a control-plane node,
// a target version this kubeadm can reach, and the preflight checks (FailPreflight).
func (h *Host) applyChecks(kubeadmVersion, target string, args []string) error {
	if !h.ControlPlane() {
		return errors.New("[upgrade/config] FATAL: this node is not a control-plane node")
	}
	want, err := protocol.ParseVersion(target)
	if err != nil {
		return fmt.Errorf("[upgrade/version] FATAL: %q is not a version: %w", target, err)
	}
	have, err := protocol.ParseVersion(kubeadmVersion)
	if err != nil || have.LT(want) {
		return fmt.Errorf("[upgrade/version] FATAL: the --version argument is invalid due to these errors:\n\n\t- Specified version to upgrade to %q is higher than the kubeadm version %q", target, kubeadmVersion)
	}
	return h.preflight(args, true)
}

// upgrade rewrites what kubeadm upgrade rewrites on a node: the static pod
// manifests (control plane, rendered from the cluster's kubeadm-config) and the
// kubelet configuration.
func (h *Host) upgrade(ctx context.Context, version string) (string, error) {
	if h.ControlPlane() {
		// Bounded like the real kubeadm's API calls.
		readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cc, err := h.readClusterConfiguration(readCtx)
		cancel()
		if err != nil {
			return "", err
		}
		for _, c := range staticPods() {
			if err := writeFile(h.path("etc/kubernetes/manifests/"+c+".yaml"), []byte(renderManifest(c, "registry.k8s.io/"+c+":"+version, cc.component(c)))); err != nil {
				return "", err
			}
		}
		if err := h.appendFile("var/lib/etcd/member/snap/db", "etcd data migrated by kubeadm "+version+"\n"); err != nil {
			return "", err
		}
	}
	if err := writeFile(h.path("var/lib/kubelet/config.yaml"), []byte(kubeletConfig(version))); err != nil {
		return "", err
	}
	if hasInstanceConfig(version) {
		if err := writeFile(h.path("var/lib/kubelet/instance-config.yaml"), []byte(instanceConfig(version))); err != nil {
			return "", err
		}
	}
	h.startOutage()
	return fmt.Sprintf("[upgrade/successful] SUCCESS! Your node was upgraded to %q.\n", version), nil
}

func (h *Host) appendFile(p, s string) error {
	f, err := os.OpenFile(h.path(p), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(s)
	return err
}

// startOutage turns a pending api-outage-seconds into an outage window.
func (h *Host) startOutage() {
	n, err := strconv.Atoi(h.readTrim(h.simPath("api-outage-seconds")))
	if err != nil || n <= 0 {
		return
	}
	until := h.now().Add(time.Duration(n) * time.Second)
	_ = writeFile(h.simPath("api-down-until"), []byte(until.UTC().Format(time.RFC3339Nano)+"\n"))
	_ = os.Rename(h.simPath("api-outage-seconds"), h.simPath("api-outage-seconds.done"))
	h.Log.Info("Simulated API server outage", "node", h.NodeName, "until", until)
}

func (h *Host) systemctl(args []string) (string, error) {
	switch strings.Join(args, " ") {
	case "daemon-reload":
		return "", nil
	case "restart chrony", "restart systemd-timesyncd":
		return "", nil
	case "restart kubelet":
		if err := h.startKubelet(); err != nil {
			return "", err
		}
		h.Kick()
		return "", nil
	}
	return "", fmt.Errorf("simulated systemctl: unsupported arguments %q", strings.Join(args, " "))
}

// user emulates useradd and usermod on <root>/etc/passwd (name, home, shell,
// gecos); other flags are accepted and recorded in commands.log only.
func (h *Host) user(tool string, args []string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("%s: no user name", tool)
	}
	name := args[len(args)-1]
	flags := map[string]string{}
	for i := 0; i < len(args)-1; i++ {
		if strings.HasPrefix(args[i], "-") && args[i] != "-m" && args[i] != "-L" && i+1 < len(args)-1 {
			flags[args[i]] = args[i+1]
			i++
		}
	}
	for _, g := range append(strings.Split(flags["-G"], ","), flags["-g"]) {
		if g != "" && !h.hasGroup(g) {
			return "", fmt.Errorf("%s: group '%s' does not exist", tool, g)
		}
	}
	raw, err := os.ReadFile(h.path("etc/passwd"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	idx, maxUID := -1, 999
	for i, l := range lines {
		f := strings.Split(l, ":")
		if f[0] == name {
			idx = i
		}
		if len(f) > 2 {
			if uid, err := strconv.Atoi(f[2]); err == nil && uid > maxUID && uid < 60000 {
				maxUID = uid
			}
		}
	}
	switch {
	case tool == "useradd" && idx >= 0:
		return "", fmt.Errorf("useradd: user '%s' already exists", name)
	case tool == "usermod" && idx < 0:
		return "", fmt.Errorf("usermod: user '%s' does not exist", name)
	case tool == "useradd":
		uid := strconv.Itoa(maxUID + 1)
		lines = append(lines, strings.Join([]string{name, "x", uid, uid, "", "/home/" + name, "/bin/sh"}, ":"))
		idx = len(lines) - 1
	}
	f := strings.Split(lines[idx], ":")
	for flag, field := range map[string]int{"-c": 4, "-d": 5, "-s": 6} {
		if v, ok := flags[flag]; ok {
			f[field] = v
		}
	}
	lines[idx] = strings.Join(f, ":")
	return "", writeFile(h.path("etc/passwd"), []byte(strings.Join(lines, "\n")+"\n"))
}

func (h *Host) hasGroup(name string) bool {
	raw, err := os.ReadFile(h.path("etc/group"))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f, _, _ := strings.Cut(l, ":"); f == name {
			return true
		}
	}
	return false
}

// chpasswd emulates `chpasswd -e`: each stdin line is name:hash for an existing
// user; the hash is kept in <root>/etc/shadow (name:hash:...).
func (h *Host) chpasswd(args []string, stdin []byte) (string, error) {
	if len(args) != 1 || args[0] != "-e" {
		return "", fmt.Errorf("simulated chpasswd: unsupported arguments %q", strings.Join(args, " "))
	}
	shadow, _ := os.ReadFile(h.path("etc/shadow"))
	lines := strings.Split(strings.TrimRight(string(shadow), "\n"), "\n")
	for i, in := range strings.Split(strings.TrimRight(string(stdin), "\n"), "\n") {
		name, hash, ok := strings.Cut(in, ":")
		if _, exists := h.passwdUser(name); !ok || !exists {
			return "", fmt.Errorf("chpasswd: line %d: user '%s' does not exist", i+1, name)
		}
		entry := name + ":" + hash + ":::::::"
		replaced := false
		for j, l := range lines {
			if f, _, _ := strings.Cut(l, ":"); f == name {
				lines[j], replaced = entry, true
			}
		}
		if !replaced {
			lines = append(lines, entry)
		}
	}
	return "", writeFile(h.path("etc/shadow"), []byte(strings.TrimLeft(strings.Join(lines, "\n"), "\n")+"\n"))
}

func (h *Host) passwdUser(name string) (string, bool) {
	raw, err := os.ReadFile(h.path("etc/passwd"))
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f, _, _ := strings.Cut(l, ":"); f == name && name != "" {
			return l, true
		}
	}
	return "", false
}
