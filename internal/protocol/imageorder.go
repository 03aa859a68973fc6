package protocol

// ImageOrder is which of a new OS image and a Kubernetes upgrade a node runs
// first when one update changes both and the image takes effect at a reboot. A
// kubelet must never be newer than its API server (Kubernetes' version skew
// policy), and the new image usually carries the new kubelet.
type ImageOrder string

const (
	// ImageOrderKubernetesFirst: a control plane upgrades its static pods with the
	// kubeadm the plan delivers, then boots the image, whose kubelet starts beside
	// an API server of its own version.
	ImageOrderKubernetesFirst ImageOrder = "KubernetesFirst"
	// ImageOrderImageFirstKubeletAhead: a control plane whose new kubeadm exists
	// only in its image boots the image first; from the reboot until `kubeadm
	// upgrade` has moved the static pods (minutes), its kubelet runs one version
	// ahead of the API server. Delivering kubeadm and the kubelet with the plan
	// (the policy's kubernetesBinaries) turns it into ImageOrderKubernetesFirst.
	ImageOrderImageFirstKubeletAhead ImageOrder = "ImageFirstKubeletAhead"
	// ImageOrderImageFirstWorker: a worker boots the image first, then runs
	// `kubeadm upgrade node`; Cluster API updates workers after the control
	// plane, so the new kubelet meets a new API server.
	ImageOrderImageFirstWorker ImageOrder = "ImageFirstWorker"
)

// OrderImageAndKubernetes is the one rule for the order of an update that boots a
// new OS image and upgrades Kubernetes on one node: the agent derives its actions
// from it and `capi-inplace plan` reports it.
func OrderImageAndKubernetes(controlPlane, binariesDelivered bool) ImageOrder {
	switch {
	case !controlPlane:
		return ImageOrderImageFirstWorker
	case binariesDelivered:
		return ImageOrderKubernetesFirst
	}
	return ImageOrderImageFirstKubeletAhead
}
