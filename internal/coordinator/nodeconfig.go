package coordinator

import (
	"encoding/json"
	"fmt"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-inplace/capi-inplace/internal/coordinator/nodeplan"
	"github.com/capi-inplace/capi-inplace/internal/policy"
	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// NodeConfigResolver returns the OS backend configuration of a Machine's pool (by
// its namespace and labels), nil when the policy has none for it.
type NodeConfigResolver interface {
	OSBackends(namespace string, machineLabels map[string]string) json.RawMessage
}

var _ NodeConfigResolver = (*policy.Policy)(nil)

// poolOSBackends is the OS backend configuration the Machine's plan carries: the
// agent writes it to the node before it stages an OS image, so that a new pool
// needs no file written by hand on its nodes.
func poolOSBackends(r NodeConfigResolver, m *clusterv1.Machine) json.RawMessage {
	if r == nil {
		return nil
	}
	return r.OSBackends(m.Namespace, m.Labels)
}

// DeclaredOSImageResolver resolves an OS image declared in the KubeadmConfig's
// policy.OSImageFile to an artifact with a digest (policy.Policy.DeclaredOSImage).
type DeclaredOSImageResolver interface {
	DeclaredOSImage(image, namespace, cluster string) (*protocol.OSImage, string)
}

var _ DeclaredOSImageResolver = (*policy.Policy)(nil)

// declaredOSImage returns the OS image the desired KubeadmConfig declares, nil when
// it declares none. A declared image that does not resolve is an input error: the
// planner covers a declared image change only when it resolves, so this one was
// declared some other way than through an update (a new Machine keeps its
// infrastructure's image, and CAPI replaced it, not us).
func declaredOSImage(r DeclaredOSImageResolver, cfg *bootstrapv1.KubeadmConfig, m *clusterv1.Machine) (*protocol.OSImage, error) {
	if r == nil || cfg == nil {
		return nil, nil
	}
	for _, f := range cfg.Spec.Files {
		if f.Path != policy.OSImageFile {
			continue
		}
		image := policy.DeclaredImage(f.Content)
		if image == "" {
			return nil, nil
		}
		img, reason := r.DeclaredOSImage(image, m.Namespace, m.Spec.ClusterName)
		if img == nil {
			return nil, fmt.Errorf("%w: OS image declared in %s of KubeadmConfig %s: %s", nodeplan.ErrInput, policy.OSImageFile, cfg.Name, reason)
		}
		return img, nil
	}
	return nil, nil
}
