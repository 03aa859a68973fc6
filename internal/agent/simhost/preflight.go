package simhost

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// Preflight checks the simulated kubeadm can be told to fail, as they fail on
// the real kubeadm node of the real-node lane (docs/agent-node.md).
const (
	// CheckSystemVerification fails on a cgroup v1 host (upgrade apply and node).
	CheckSystemVerification = "SystemVerification"
	// CheckCoreDNSUnsupportedPlugins and CheckCoreDNSMigration fail upgrade apply
	// on a cluster without CoreDNS.
	CheckCoreDNSUnsupportedPlugins = "CoreDNSUnsupportedPlugins"
	CheckCoreDNSMigration          = "CoreDNSMigration"
	// CheckCreateJob is upgrade apply's health check that a Job's pod runs on a
	// schedulable node within 60 s; it fails while the cluster cannot, which is
	// often transient: list it as "CreateJob*N" to fail the next N runs only.
	CheckCreateJob = "CreateJob"
	// CheckImagePull fails upgrade apply and node on a control plane whose
	// registry lacks an image kubeadm lists (the CoreDNS and kube-proxy images of
	// a cluster that runs neither, as in the real Cluster API lane), unless the
	// --config UpgradeConfiguration turns the pull off (imagePullPolicy: Never).
	CheckImagePull = "ImagePull"
)

// applyOnly are the checks only `kubeadm upgrade apply` runs.
var applyOnly = []string{CheckCoreDNSUnsupportedPlugins, CheckCoreDNSMigration, CheckCreateJob}

// preflight fails a kubeadm upgrade as kubeadm does when a check listed in
// .sim/preflight-failures (one name per line; opt-in: absent means every check
// passes) is not covered by --ignore-preflight-errors.
func (h *Host) preflight(args []string, apply bool) error {
	raw := h.readTrim(h.simPath("preflight-failures"))
	if raw == "" {
		return nil
	}
	ignored := map[string]bool{}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--ignore-preflight-errors="); ok {
			for _, n := range strings.Split(v, ",") {
				ignored[strings.ToLower(strings.TrimSpace(n))] = true
			}
		}
	}
	var failed, kept []string
	consumed := false // a transient failure ran: the file keeps its count
	for _, entry := range strings.Fields(raw) {
		name, times, transient := strings.Cut(entry, "*")
		left, _ := strconv.Atoi(times)
		if transient && left <= 0 {
			continue // a transient failure that has run out
		}
		kept = append(kept, entry)
		if !apply && slices.Contains(applyOnly, name) {
			continue
		}
		if name == CheckImagePull {
			noPull, err := h.pullTurnedOff(args, apply)
			if err != nil {
				return err
			}
			if noPull || !h.ControlPlane() {
				continue // kubeadm pulls images on a control plane only
			}
		}
		if !ignored["all"] && !ignored[strings.ToLower(name)] {
			failed = append(failed, fmt.Sprintf("\t[ERROR %s]: %s\n", name, preflightMessage(name)))
			if transient {
				kept[len(kept)-1] = fmt.Sprintf("%s*%d", name, left-1)
				consumed = true
			}
		}
	}
	if consumed {
		if err := writeFile(h.simPath("preflight-failures"), []byte(strings.Join(kept, "\n")+"\n")); err != nil {
			return err
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("[preflight] Some fatal errors occurred:\n%s[preflight] If you know what you are doing, you can make a check non-fatal with `--ignore-preflight-errors=...`", strings.Join(failed, ""))
}

// pullTurnedOff reports whether the UpgradeConfiguration kubeadm was given
// (--config) sets imagePullPolicy Never for the command (apply or node).
func (h *Host) pullTurnedOff(args []string, apply bool) (bool, error) {
	i := slices.Index(args, "--config")
	if i < 0 || i+1 >= len(args) {
		return false, nil
	}
	raw, err := os.ReadFile(h.path(args[i+1]))
	if err != nil {
		return false, fmt.Errorf("unable to read config from %q: %w", args[i+1], err)
	}
	type pull struct {
		ImagePullPolicy string `json:"imagePullPolicy"`
	}
	var cfg struct {
		Kind  string `json:"kind"`
		Apply pull   `json:"apply"`
		Node  pull   `json:"node"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return false, fmt.Errorf("unable to decode config from %q: %w", args[i+1], err)
	}
	if cfg.Kind != "UpgradeConfiguration" {
		return false, fmt.Errorf("config %q is a %q, not an UpgradeConfiguration", args[i+1], cfg.Kind)
	}
	if apply {
		return cfg.Apply.ImagePullPolicy == "Never", nil
	}
	return cfg.Node.ImagePullPolicy == "Never", nil
}

func preflightMessage(name string) string {
	switch name {
	case CheckSystemVerification:
		return "cgroups v1 support is deprecated and will be removed in a future release. Please migrate to cgroups v2. To explicitly enable cgroups v1 support for kubelet v1.35 or newer, you must set the kubelet configuration option 'FailCgroupV1' to 'false'. You must also explicitly skip this validation."
	case CheckCoreDNSUnsupportedPlugins:
		return "start version '' not supported"
	case CheckCoreDNSMigration:
		return "CoreDNS will not be upgraded: start version '' not supported"
	case CheckImagePull:
		return "failed to pull image registry.k8s.io/coredns/coredns:v1.12.1: rpc error: code = NotFound desc = failed to pull and unpack image: not found"
	case CheckCreateJob:
		return "Job \"upgrade-health-check\" in the namespace \"kube-system\" did not complete in 1m0s: no condition of type Complete"
	}
	return "simulated preflight failure"
}

// hasInstanceConfig reports whether kubeadm of the version writes the kubelet's
// instance-config.yaml (1.35 and newer).
func hasInstanceConfig(version string) bool {
	v, err := protocol.ParseVersion(version)
	return err == nil && (v.Major > 1 || v.Minor >= 35)
}

func instanceConfig(version string) string {
	return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n# written by kubeadm " + version + "\n"
}
