package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// KubernetesBinariesConfig maps a Kubernetes version ("v1.36.3") to the kubeadm and
// kubelet of each node platform ("linux/amd64", "linux/arm64", ...):
//
//	kubernetesBinaries:
//	  v1.36.3:
//	    linux/amd64:
//	      kubeadm: {url: https://dl.k8s.io/v1.36.3/bin/linux/amd64/kubeadm, digest: "sha256:..."}
//	      kubelet: {url: https://dl.k8s.io/v1.36.3/bin/linux/amd64/kubelet, digest: "sha256:...",
//	                mirrors: ["oci+http://mirror.site-a.local:5000/k8s/kubelet"]}
//
// A version without an entry is planned as before: the node's OS image (or package
// source) must bring its binaries.
type KubernetesBinariesConfig map[string]map[string]BinariesConfig

// BinariesConfig is the kubeadm and kubelet of one version and platform.
type BinariesConfig struct {
	// Kubeadm is the kubeadm executable of the version and platform.
	Kubeadm BinaryConfig `json:"kubeadm"`
	// Kubelet is the kubelet executable of the version and platform.
	Kubelet BinaryConfig `json:"kubelet"`
}

// BinaryConfig is one executable: where to download it and its digest.
type BinaryConfig struct {
	// URL is an http(s) URL or an OCI repository (oci://, oci+http://) whose blob
	// of Digest is the file; http is enough, the digest verifies the content.
	URL string `json:"url"`
	// Digest is "sha256:<64 lowercase hex>" of the file (the hex is what
	// `sha256sum` prints and what dl.k8s.io serves as <binary>.sha256).
	Digest string `json:"digest"`
	// Mirrors are other sources of the same file (air-gapped sites), tried in
	// order before URL.
	Mirrors []string `json:"mirrors,omitempty"`
	// Size is the file's length in bytes; a source that announces or sends
	// another length fails staging for good, as a digest mismatch does.
	// Optional: without it the agent bounds a download at 4 GiB.
	Size int64 `json:"size,omitempty"`
}

// artifact is the plan's form of the binary, with the settings of its
// sources' hosts.
func (b BinaryConfig) artifact(sources map[string]protocol.SourceHost) protocol.BinaryArtifact {
	a := protocol.BinaryArtifact{URL: b.URL, Digest: b.Digest, Mirrors: slices.Clone(b.Mirrors), Size: b.Size}
	withSources(&a, sources)
	return a
}

// ErrNoBinariesForPlatform is returned by KubernetesBinaries when the policy lists
// binaries for the version but not for the node's platform: the node cannot get
// the version the way the operator declared it, so nothing is planned.
var ErrNoBinariesForPlatform = errors.New("policy lists Kubernetes binaries for the version, but not for the node's platform")

// compileBinaries validates the table and converts it to plan artifacts.
func compileBinaries(cfg KubernetesBinariesConfig, sources map[string]protocol.SourceHost) (map[string]map[string]protocol.KubernetesBinaries, []error) {
	var errs []error
	out := map[string]map[string]protocol.KubernetesBinaries{}
	for _, version := range sortedKeys(cfg) {
		platforms := cfg[version]
		if !protocol.ValidVersion(version) {
			errs = append(errs, fmt.Errorf("kubernetesBinaries[%q]: not a Kubernetes version like v1.36.3", version))
			continue
		}
		if len(platforms) == 0 {
			errs = append(errs, fmt.Errorf("kubernetesBinaries[%q]: lists no platform", version))
			continue
		}
		out[version] = map[string]protocol.KubernetesBinaries{}
		for _, platform := range sortedKeys(platforms) {
			b := platforms[platform]
			entry := protocol.KubernetesBinaries{
				Platform: platform,
				Kubeadm:  b.Kubeadm.artifact(sources),
				Kubelet:  b.Kubelet.artifact(sources),
			}
			if err := entry.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("kubernetesBinaries[%q][%q]: %w", version, platform, err))
				continue
			}
			out[version][platform] = entry
		}
	}
	return out, errs
}

// KubernetesBinaries returns the kubeadm and kubelet the policy lists for a version
// on a node platform ("linux/amd64"). It returns nil and no error when the policy
// lists none for the version, and ErrNoBinariesForPlatform when it lists the
// version for other platforms only.
func (p *Policy) KubernetesBinaries(version, platform string) (*protocol.KubernetesBinaries, error) {
	platforms, ok := p.binaries[version]
	if !ok {
		return nil, nil
	}
	b, ok := platforms[platform]
	if !ok {
		return nil, fmt.Errorf("%w: version %s has %s, node platform is %q", ErrNoBinariesForPlatform, version, strings.Join(sortedKeys(platforms), ", "), platform)
	}
	return &b, nil
}

// ListsKubernetesBinaries reports whether the policy lists kubeadm and the
// kubelet of a version, for any platform.
func (p *Policy) ListsKubernetesBinaries(version string) bool {
	_, ok := p.binaries[version]
	return ok
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
