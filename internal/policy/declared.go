package policy

import (
	"strings"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// OSImageFile is the host path of the file that declares a node's OS image: one
// line, the image's name as the artifacts table lists it. It is an ordinary
// KubeadmConfig file (spec.files), so it works with every infrastructure provider,
// Cluster API updates it in place for control planes (KubeadmControlPlane
// spec.kubeadmConfigSpec.files) and workers (KubeadmConfigTemplate) alike, a
// ClusterClass variable and patch can set it, and the agent writes it on the node
// with the update, where it records the image the node runs:
//
//	files:
//	- path: /etc/capi-inplace/os-image
//	  content: edge-os-2026.12
const OSImageFile = "/etc/capi-inplace/os-image"

// DeclaredImageKind is the kind an artifacts entry names (kind: KubeadmConfig)
// to apply only to images declared in OSImageFile; an entry without a kind applies
// to those too.
const DeclaredImageKind = "KubeadmConfig"

// DeclaredImage returns the image a KubeadmConfig file content declares (its
// first line, trimmed), "" for none.
func DeclaredImage(content string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(content), "\n")
	return strings.TrimSpace(line)
}

// DeclaredOSImage resolves an image declared in OSImageFile to the OS image a node
// plan carries, or nil and the reason it cannot be installed (see OSImageFor).
func (p *Policy) DeclaredOSImage(image, namespace, cluster string) (*protocol.OSImage, string) {
	return p.OSImageFor(DeclaredImageKind, image, namespace, cluster)
}
