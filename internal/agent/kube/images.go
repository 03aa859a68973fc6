package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// ImagesConfig is the kubeadm configuration file the image pre-pull writes (in
// WorkDir) and hands to the new kubeadm's `config images pull --config`.
const ImagesConfig = WorkDir + "/images-pull.yaml"

// ErrImagePull is wrapped when the control-plane images the new kubeadm needs
// cannot be pulled onto the node.
var ErrImagePull = errors.New("control-plane images cannot be pulled")

// NeedsControlPlaneImages reports whether k's kubeadm command starts the
// control-plane static pods of a new release on this node, so their images must
// be on it: a control-plane node whose version changes. A worker's `kubeadm
// upgrade node` only rewrites the kubelet's configuration.
func NeedsControlPlaneImages(k protocol.KubernetesPlan) bool {
	return k.Role == protocol.RoleControlPlane && (k.Action == protocol.KubeadmUpgradeApply || k.Action == protocol.KubeadmUpgradeNode)
}

// StagesControlPlaneImages reports whether staging puts the images of k's
// control-plane static pods on the node before the cordon: a node that needs
// them (NeedsControlPlaneImages) and whose new kubeadm the plan delivers.
// Without it the new kubeadm arrives only with the OS image, after the cordon,
// and `kubeadm upgrade` pulls the images itself.
func StagesControlPlaneImages(k protocol.KubernetesPlan) bool {
	return k.Binaries != nil && NeedsControlPlaneImages(k)
}

// PullControlPlaneImages makes sure the images of plan's control-plane static pods
// at the new version are in the node's container runtime, pulled by the new
// release's kubeadm (kubeadm, its host path: the staged copy in the artifact store)
// while the node still serves, so that the `kubeadm upgrade` after the cordon
// need not pull (its preflight is told not to: imagePullFlags). kubeadm names
// the images: `kubeadm config images pull` for the target version, the image
// settings `kubeadm upgrade` renders the static pods from (see imageSettings: the
// plan's ClusterConfiguration, the one the workload cluster's kubeadm-config holds
// by then, with the node's kube-apiserver manifest for a repository it leaves
// unset), the node's CRI socket (the kubelet's containerRuntimeEndpoint), and etcd
// only for a stacked member; CoreDNS and kube-proxy are not static pods of the
// node and are left to their DaemonSet and Deployment. It returns the images
// kubeadm pulled (or found). Repeatable: images present are not pulled again.
func (h *Host) PullControlPlaneImages(ctx context.Context, kubeadm string, plan *protocol.NodePlan) ([]string, error) {
	k := plan.Kubernetes
	if !NeedsControlPlaneImages(k) {
		return nil, nil
	}
	img, err := h.imageSettings(plan.ClusterConfiguration)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrImagePull, err)
	}
	cfg := imagesConfig(k, img, h.criSocket())
	if err := h.writeHostFile(ImagesConfig, cfg, 0o600, -1, -1); err != nil {
		return nil, fmt.Errorf("%w: write %s: %w", ErrImagePull, ImagesConfig, err)
	}
	defer func() { _ = h.removeHostFile(ImagesConfig) }()
	res, err := h.run(ctx, kubeadm, "config", "images", "pull", "--config", ImagesConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeadm %s config images pull: %w", ErrImagePull, k.Version, err)
	}
	var pulled []string
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		// "[config/images] Pulled registry.k8s.io/kube-apiserver:v1.36.3"
		if _, ref, ok := strings.Cut(line, "] Pulled "); ok {
			pulled = append(pulled, strings.TrimSpace(ref))
		}
	}
	return pulled, nil
}

// imageSettings are the fields of a kubeadm ClusterConfiguration that name the
// control-plane images (kubeadm's images.GetKubernetesImage and GetEtcdImage):
// imageRepository for every image, etcd.local.imageRepository and imageTag for
// etcd's. The JSON paths are those of Cluster API's ClusterConfiguration (the
// plan's) and of kubeadm's v1beta4 alike. dns.imageRepository/imageTag are not
// here: the pre-pull leaves CoreDNS to its Deployment (dns.disabled).
type imageSettings struct {
	ImageRepository string `json:"imageRepository,omitempty"`
	Etcd            struct {
		Local struct {
			ImageRepository string `json:"imageRepository,omitempty"`
			ImageTag        string `json:"imageTag,omitempty"`
		} `json:"local"`
	} `json:"etcd"`
}

// imageSettings returns the image settings `kubeadm upgrade` will render this
// node's static pods from: those of the plan's ClusterConfiguration (Cluster API
// writes them to the workload cluster's kubeadm-config before the machine is
// updated, and kubeadm upgrade reads them there), with the repository the node's
// kube-apiserver runs from when the plan sets none (kubeadm-config then keeps the
// cluster's repository: KCP writes imageRepository only when it is set). Without
// a ClusterConfiguration in the plan the etcd image takes kubeadm's defaults.
func (h *Host) imageSettings(clusterConfiguration json.RawMessage) (imageSettings, error) {
	var img imageSettings
	if len(clusterConfiguration) > 0 {
		if err := json.Unmarshal(clusterConfiguration, &img); err != nil {
			return imageSettings{}, fmt.Errorf("the plan's clusterConfiguration: %w", err)
		}
	}
	if img.ImageRepository == "" {
		repo, err := h.imageRepository()
		if err != nil {
			return imageSettings{}, err
		}
		img.ImageRepository = repo
	}
	return img, nil
}

// imagesConfig is the kubeadm v1beta4 configuration naming what the pre-pull needs.
func imagesConfig(k protocol.KubernetesPlan, img imageSettings, criSocket string) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n")
	if criSocket != "" {
		fmt.Fprintf(&b, "nodeRegistration:\n  criSocket: %q\n", criSocket)
	}
	b.WriteString("---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n")
	fmt.Fprintf(&b, "kubernetesVersion: %q\n", k.Version)
	if img.ImageRepository != "" {
		fmt.Fprintf(&b, "imageRepository: %q\n", img.ImageRepository)
	}
	b.WriteString("dns:\n  disabled: true\nproxy:\n  disabled: true\n")
	local := img.Etcd.Local
	switch {
	case k.ExternalEtcd:
		// No local member: kubeadm names no etcd image for an external etcd (the
		// endpoint is never contacted by `config images pull`).
		b.WriteString("etcd:\n  external:\n    endpoints: [\"https://127.0.0.1:2379\"]\n")
	case local.ImageRepository != "" || local.ImageTag != "":
		// A pinned etcd (imageTag: kubeadm upgrade keeps it) or one from its own
		// registry: the member kubeadm upgrade starts runs that image.
		b.WriteString("etcd:\n  local:\n")
		if local.ImageRepository != "" {
			fmt.Fprintf(&b, "    imageRepository: %q\n", local.ImageRepository)
		}
		if local.ImageTag != "" {
			fmt.Fprintf(&b, "    imageTag: %q\n", local.ImageTag)
		}
	}
	return []byte(b.String())
}

// imageRepository is the registry path the node's control-plane images come from:
// the kube-apiserver manifest's image without "/kube-apiserver:<tag>" (kubeadm
// renders every control-plane image from ClusterConfiguration.imageRepository).
func (h *Host) imageRepository() (string, error) {
	image, err := h.manifestImage(APIServerManifest, "kube-apiserver")
	if err != nil {
		return "", err
	}
	name, _ := splitImage(image)
	if path.Base(name) != "kube-apiserver" || !strings.Contains(name, "/") {
		return "", fmt.Errorf("%s: image %q is not <repository>/kube-apiserver", APIServerManifest, image)
	}
	return path.Dir(name), nil
}

// manifestImage is the image of the container named container in the static pod
// manifest at host path manifest.
func (h *Host) manifestImage(manifest, container string) (string, error) {
	f, err := h.readHostFile(manifest)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", manifest, err)
	}
	var pod struct {
		Spec struct {
			Containers []struct {
				Name  string `json:"name"`
				Image string `json:"image"`
			} `json:"containers"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(f.Data, &pod); err != nil {
		return "", fmt.Errorf("%s: %w", manifest, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("%s has no %s container", manifest, container)
}

// splitImage splits an image reference into its name and its tag ("" when it
// has none); a digest is dropped.
func splitImage(ref string) (name, tag string) {
	name, _, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[:i], name[i+1:]
	}
	return name, ""
}

// runsRenderedImages reports whether the static pods `kubeadm upgrade node` at
// the running version renders from the plan's ClusterConfiguration run the
// images the node runs now: the plan names no image repository other than the
// running kube-apiserver's, and no etcd repository or tag other than the running
// etcd's. An etcd image change the plan does not name (a pinned tag removed) is
// not seen: the kubelet pulls it when the pod starts, and the agent's gates judge
// the result.
func (h *Host) runsRenderedImages(clusterConfiguration json.RawMessage) bool {
	img, err := h.imageSettings(clusterConfiguration)
	if err != nil {
		return false
	}
	running, err := h.imageRepository()
	if err != nil || img.ImageRepository != running {
		return false
	}
	local := img.Etcd.Local
	if local.ImageRepository == "" && local.ImageTag == "" {
		return true
	}
	etcd, err := h.manifestImage(EtcdManifest, "etcd")
	if err != nil {
		return false
	}
	name, tag := splitImage(etcd)
	return (local.ImageRepository == "" || local.ImageRepository == path.Dir(name)) && (local.ImageTag == "" || local.ImageTag == tag)
}

// criSocket is the kubelet's container runtime endpoint: kubeadm 1.35+ keeps it in
// instance-config.yaml, older releases in config.yaml or the kubeadm flags. ""
// lets kubeadm find the socket itself.
func (h *Host) criSocket() string {
	for _, p := range []string{KubeletInstanceConfig, KubeletConfig} {
		f, err := h.readHostFile(p)
		if err != nil {
			continue
		}
		var c struct {
			ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
		}
		if yaml.Unmarshal(f.Data, &c) == nil && c.ContainerRuntimeEndpoint != "" {
			return c.ContainerRuntimeEndpoint
		}
	}
	if f, err := h.readHostFile(KubeadmFlagsPath); err == nil {
		args := strings.TrimPrefix(strings.TrimSpace(string(f.Data)), "KUBELET_KUBEADM_ARGS=")
		for _, field := range strings.Fields(strings.Trim(args, `"`)) {
			if v, ok := strings.CutPrefix(field, "--container-runtime-endpoint="); ok {
				return strings.Trim(v, `"`)
			}
		}
	}
	return ""
}
