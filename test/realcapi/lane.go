package realcapi

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/localstack"
	"github.com/capi-inplace/capi-inplace/test/lanekit"
)

// The lane's two releases (hack/realnode/versions.sh): nodes start at From and are
// updated in place to To.
const (
	From = "v1.35.4"
	To   = "v1.36.3"
)

// Gateway is the kind network's gateway (hack/realcapi/dockerd.sh): the address of
// the lane's network namespace as the node containers see it.
const Gateway = "172.18.0.1"

// registryAddr is the lane's registry: containerd on the nodes mirrors
// registry.k8s.io and capi-inplace.local to it (hack/realcapi/images.sh).
const registryAddr = Gateway + ":5123"

// UpgradePreflightIgnores are kubeadm's preflight checks that fail on every lane node
// for reasons of the machine (cgroup v1) or of the lane (no CoreDNS): the policy's
// exceptions for the agent.
var UpgradePreflightIgnores = []string{"SystemVerification", "CoreDNSUnsupportedPlugins", "CoreDNSMigration"}

// ManualUpgradePreflightIgnores are the checks a `kubeadm upgrade` by hand skips
// here: the agent's, and ImagePull, since its preflight pulls every image kubeadm
// lists, CoreDNS and kube-proxy too, and no such image exists here (CAPI's
// ClusterConfiguration cannot disable either addon). The agent turns that pull off
// once it has staged the control-plane images.
var ManualUpgradePreflightIgnores = append(slices.Clone(UpgradePreflightIgnores), "ImagePull")

// Mirrors are the lane's registry (the target release's control-plane images and
// the images a caller pushes) and artifact server (the Kubernetes binaries of both
// releases, hack/realnode/build.sh).
type Mirrors struct {
	Registry  *lanekit.Registry
	Artifacts *lanekit.ArtifactServer
	k8sDir    string
}

// StartMirrors serves the mirrors on the gateway; root is the repository (its
// _cache/realnode holds the releases), dir the registry's storage, images maps an
// image reference to its tarball.
func StartMirrors(ctx context.Context, root, dir string, images map[string]string) (*Mirrors, error) {
	cache := filepath.Join(root, "_cache", "realnode")
	reg, err := lanekit.StartRegistry(registryAddr, dir)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	m := &Mirrors{Registry: reg, k8sDir: filepath.Join(cache, "k8s")}
	if err := reg.PushRelease(ctx, cache, To); err != nil {
		m.Close()
		return nil, err
	}
	for ref, tar := range images {
		if err := reg.Push(ctx, ref, tar); err != nil {
			m.Close()
			return nil, err
		}
	}
	if m.Artifacts, err = lanekit.ServeArtifacts(Gateway+":0", m.k8sDir); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close stops the mirrors.
func (m *Mirrors) Close() {
	if m.Artifacts != nil {
		m.Artifacts.Close()
	}
	m.Registry.Close()
}

// BinariesPolicy is the part of the extension's policy every lane cluster needs:
// kubeadm's preflight exceptions and To's kubeadm and kubelet from the artifact
// server, named by digest.
func (m *Mirrors) BinariesPolicy() (string, error) {
	sums := map[string]string{}
	for _, b := range []string{"kubeadm", "kubelet"} {
		s, err := lanekit.SHA256File(filepath.Join(m.k8sDir, To, b))
		if err != nil {
			return "", err
		}
		sums[b] = s
	}
	url := m.Artifacts.URL
	return fmt.Sprintf(`kubeadm:
  ignorePreflightErrors: [%s]
kubernetesBinaries:
  %s:
    linux/amd64:
      kubeadm: {url: %s/%s/kubeadm, digest: "sha256:%s"}
      kubelet: {url: %s/%s/kubelet, digest: "sha256:%s"}
`, strings.Join(UpgradePreflightIgnores, ", "), To, url, To, sums["kubeadm"], url, To, sums["kubelet"]), nil
}

// Extension is bin/capi-inplace as a Deployment runs it: it installs the node agent
// (agentImage, from the lane's registry) into each workload cluster, with the policy
// in policyFile; labels select the namespaces it serves.
func Extension(binDir, name, policyFile, agentImage string, labels map[string]string) localstack.ExtensionSpec {
	return localstack.OurExtensionWith(binDir, name, labels, nil, "--policy-file="+policyFile, "--agent-image="+agentImage)
}
