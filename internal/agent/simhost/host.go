package simhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	"github.com/capi-inplace/capi-inplace/internal/agent/executor"
	"github.com/capi-inplace/capi-inplace/internal/agent/kube"
	"github.com/capi-inplace/capi-inplace/internal/backend/simulated"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Control-plane static pods and the image tags the simulated kubeadm writes.
func staticPods() []string {
	return []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}
}

// Host is one simulated node.
type Host struct {
	// Root is the directory that stands for the node's root file system.
	Root     string
	NodeName string
	// Client is the workload cluster client the simulated kubelet reports with.
	Client kubernetes.Interface
	Log    logr.Logger
	// Now is the clock of API outages; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	trigger chan struct{}
}

// New returns a simulated host.
func New(root, nodeName string, client kubernetes.Interface, log logr.Logger) *Host {
	return &Host{Root: root, NodeName: nodeName, Client: client, Log: log, trigger: make(chan struct{}, 1)}
}

func (h *Host) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Host) path(p string) string { return filepath.Join(h.Root, p) }

func (h *Host) simPath(name string) string { return filepath.Join(h.Root, ".sim", name) }

// Options describe a fresh simulated node.
type Options struct {
	KubernetesVersion string
	ControlPlane      bool
	// PreflightFailures are kubeadm preflight checks this node fails (e.g.
	// SystemVerification on cgroup v1, the CoreDNS checks without CoreDNS), as
	// .sim/preflight-failures; none by default.
	PreflightFailures []string
}

// Initialized reports whether the host directory holds a simulated node.
func (h *Host) Initialized() bool {
	_, err := os.Stat(h.simPath("boot-id"))
	return err == nil
}

// Init lays out a fresh node: kubelet and kubeadm binaries of the version,
// kubelet config and flags, and on a control plane the static pod manifests and
// etcd data. It does nothing when the host is already initialised.
func (h *Host) Init(ctx context.Context, o Options) error {
	if h.Initialized() {
		return nil
	}
	if o.KubernetesVersion == "" {
		return errors.New("init simulated host: no Kubernetes version")
	}
	files := map[string]string{
		"usr/bin/kubeadm":                    o.KubernetesVersion + "\n",
		"usr/bin/kubelet":                    o.KubernetesVersion + "\n",
		".sim/kubelet-running":               o.KubernetesVersion + "\n",
		"var/lib/kubelet/config.yaml":        kubeletConfig(o.KubernetesVersion),
		"var/lib/kubelet/kubeadm-flags.env":  `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"` + "\n",
		"etc/kubernetes/kubelet.conf":        "# simulated kubeconfig\n",
		".sim/boots":                         "1\n",
		"etc/passwd":                         "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                          "root:x:0:\n",
		"etc/chrony/conf.d/README":           "chrony drop-ins\n",
		"var/lib/capi-inplace-sim/README.md": "Simulated node; see internal/agent/simhost.\n",
	}
	if o.ControlPlane {
		for _, c := range staticPods() {
			files["etc/kubernetes/manifests/"+c+".yaml"] = manifest(c, "registry.k8s.io/"+c+":"+o.KubernetesVersion)
		}
		files["etc/kubernetes/manifests/etcd.yaml"] = etcdManifest(h.NodeName)
		files["var/lib/etcd/member/snap/db"] = "etcd data written under Kubernetes " + o.KubernetesVersion + "\n"
	}
	if hasInstanceConfig(o.KubernetesVersion) {
		files["var/lib/kubelet/instance-config.yaml"] = instanceConfig(o.KubernetesVersion)
	}
	if len(o.PreflightFailures) > 0 {
		files[".sim/preflight-failures"] = strings.Join(o.PreflightFailures, "\n") + "\n"
	}
	for p, content := range files {
		if err := writeFile(h.path(p), []byte(content)); err != nil {
			return fmt.Errorf("init simulated host: %w", err)
		}
	}
	if _, err := simulated.New(h.Root).Status(ctx); err != nil {
		return fmt.Errorf("init simulated host: %w", err)
	}
	// boot-id last: it marks the host as initialised.
	return writeFile(h.simPath("boot-id"), []byte(newBootID()+"\n"))
}

func kubeletConfig(version string) string {
	return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n# written by kubeadm " + version + "\n"
}

func manifest(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: kube-system\nspec:\n  containers:\n  - name: %s\n    image: %s\n", name, name, image)
}

// manifestImage reads the image of a static pod manifest.
func (h *Host) manifestImage(name string) (string, error) {
	raw, err := os.ReadFile(h.path("etc/kubernetes/manifests/" + name + ".yaml"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if img, ok := strings.CutPrefix(strings.TrimSpace(line), "image: "); ok {
			return img, nil
		}
	}
	return "", fmt.Errorf("manifest %s has no image", name)
}

// ControlPlane reports whether the host has static pod manifests.
func (h *Host) ControlPlane() bool {
	_, err := os.Stat(h.path("etc/kubernetes/manifests/kube-apiserver.yaml"))
	return err == nil
}

func (h *Host) readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// BinaryVersion is the version of the simulated kubeadm or kubelet binary.
func (h *Host) BinaryVersion(name string) string { return h.readTrim(h.path("usr/bin/" + name)) }

// RunningKubelet is the version of the kubelet that runs now.
func (h *Host) RunningKubelet() string { return h.readTrim(h.simPath("kubelet-running")) }

// Boots is the number of boots so far.
func (h *Host) Boots() int {
	n, _ := strconv.Atoi(h.readTrim(h.simPath("boots")))
	return n
}

// Install implements kube.BinarySource: the simulated package source has every
// version of kubeadm and the kubelet.
func (h *Host) Install(_ context.Context, hostPath, version string) error {
	if hostPath != kube.KubeadmBinary && hostPath != kube.KubeletBinary {
		return fmt.Errorf("the simulated package source has no %s", hostPath)
	}
	return writeFile(h.path(hostPath), []byte(version+"\n"))
}

// BootID implements executor.Rebooter.
func (h *Host) BootID(context.Context) (string, error) {
	id := h.readTrim(h.simPath("boot-id"))
	if id == "" {
		return "", errors.New("simulated host has no boot ID: not initialised")
	}
	return id, nil
}

// Reboot implements executor.Rebooter: a new boot ID, the OS backend boots its
// next slot, the kubelet starts from its binary; then ErrRebooted, so the agent
// re-enters from its journal as after a real reboot.
func (h *Host) Reboot(ctx context.Context) error {
	if err := h.actionFault(ctx); err != nil {
		return err
	}
	if err := h.PowerCut(); err != nil {
		return err
	}
	return executor.ErrRebooted
}

// PowerCut is a boot the agent did not ask for (power lost and back, a kernel
// panic): the node boots what its bootloader selects, with a new boot ID, and
// the kubelet starts from whatever binary is in place.
func (h *Host) PowerCut() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := simulated.New(h.Root).Boot(); err != nil {
		return fmt.Errorf("simulated boot: %w", err)
	}
	if err := h.startKubelet(); err != nil {
		return err
	}
	if err := writeFile(h.simPath("boots"), []byte(strconv.Itoa(h.Boots()+1)+"\n")); err != nil {
		return err
	}
	if err := writeFile(h.simPath("boot-id"), []byte(newBootID()+"\n")); err != nil {
		return err
	}
	h.Log.Info("Simulated boot", "node", h.NodeName, "boots", h.Boots())
	h.Kick()
	return nil
}

// startKubelet starts the kubelet from its binary. On a control plane a kubelet
// newer than the node's kube-apiserver breaks Kubernetes' version skew policy:
// the real one runs anyway and reports its version (which KubeadmControlPlane
// reads as the Machine's), so the simulated one does too and records the
// start in kubelet-skew, for tests to assert it never happens.
func (h *Host) startKubelet() error {
	kubelet := h.BinaryVersion("kubelet")
	if err := writeFile(h.simPath("kubelet-running"), []byte(kubelet+"\n")); err != nil {
		return err
	}
	if !h.ControlPlane() {
		return nil
	}
	image, err := h.manifestImage("kube-apiserver")
	if err != nil {
		return err
	}
	_, apiServer, _ := strings.Cut(image, ":")
	kv, kerr := protocol.ParseVersion(kubelet)
	av, aerr := protocol.ParseVersion(apiServer)
	if kerr != nil || aerr != nil || !kv.GT(av) {
		return nil
	}
	f, err := os.OpenFile(h.simPath("kubelet-skew"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "kubelet %s started beside kube-apiserver %s\n", kubelet, apiServer)
	return err
}

// KubeletSkew lists the kubelet starts that broke the version skew policy
// (startKubelet), oldest first.
func (h *Host) KubeletSkew() []string {
	s := h.readTrim(h.simPath("kubelet-skew"))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Kick asks the simulated kubelet to sync now.
func (h *Host) Kick() {
	select {
	case h.trigger <- struct{}{}:
	default:
	}
}

func newBootID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp := path + ".sim-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
