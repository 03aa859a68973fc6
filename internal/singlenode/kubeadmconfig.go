package singlenode

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	kcppkg "sigs.k8s.io/cluster-api/controlplane/kubeadm/pkg"

	"github.com/capi-inplace/capi-inplace/internal/protocol"
)

// WorkloadClients hands out a client of a Cluster's workload cluster (the
// coordinator's KubeconfigClusters fits through a small adapter).
type WorkloadClients interface {
	WorkloadClient(ctx context.Context, cluster client.ObjectKey) (client.Client, error)
}

// updateKubeadmConfigMap ensures kubeadm's RBAC and writes the KubeadmControlPlane's
// ClusterConfiguration into
// the workload cluster's kube-system/kubeadm-config ConfigMap exactly as KCP does
// before it rolls out a change (updateControlPlane in controlplane/kubeadm/reconcilers/
// kubeadmcontrolplane/update.go, with KCP's own Workload mutators): image repository,
// feature gates, apiServer, controllerManager, scheduler (extraArgs, extraVolumes, ...),
// certificate validity, encryption algorithm, local or external etcd, and the
// Kubernetes version, in the kubeadm API version of the target version. `kubeadm
// upgrade` renders the static pods from this ConfigMap, so without it a held KCP's
// ClusterConfiguration changes would never reach the node. Idempotent: an unchanged
// configuration is not written.
func updateKubeadmConfigMap(ctx context.Context, wc client.Client, kcp *controlplanev1.KubeadmControlPlane) error {
	version, err := protocol.ParseVersion(kcp.Spec.Version)
	if err != nil {
		return fmt.Errorf("KubeadmControlPlane %s: version %q: %w", kcp.Name, kcp.Spec.Version, err)
	}
	w := &kcppkg.Workload{Client: wc}
	// As KCP: the ClusterRoles and bindings newer kubeadm versions expect.
	if err := w.EnsureKubeadmPermissions(ctx, version); err != nil {
		return fmt.Errorf("ensure kubeadm's RBAC in the workload cluster: %w", err)
	}
	cc := kcp.Spec.KubeadmConfigSpec.ClusterConfiguration
	var mutators []func(*bootstrapv1.ClusterConfiguration)
	if cc.IsDefined() {
		mutators = append(mutators,
			w.UpdateImageRepositoryInKubeadmConfigMap(kcppkg.ImageRepositoryFromClusterConfig(cc)),
			w.UpdateFeatureGatesInKubeadmConfigMap(kcp.Spec.KubeadmConfigSpec, version),
			w.UpdateAPIServerInKubeadmConfigMap(cc.APIServer),
			w.UpdateControllerManagerInKubeadmConfigMap(cc.ControllerManager),
			w.UpdateSchedulerInKubeadmConfigMap(cc.Scheduler),
			w.UpdateCertificateValidityPeriodDays(cc.CertificateValidityPeriodDays),
			w.UpdateEncryptionAlgorithm(cc.EncryptionAlgorithm))
		// As KCP's ControlPlane.IsEtcdManaged: local and external are exclusive.
		if cc.Etcd.External.IsDefined() {
			mutators = append(mutators, w.UpdateEtcdExternalInKubeadmConfigMap(cc.Etcd.External))
		} else {
			mutators = append(mutators, w.UpdateEtcdLocalInKubeadmConfigMap(cc.Etcd.Local))
		}
	}
	if err := w.UpdateClusterConfiguration(ctx, version, mutators...); err != nil {
		return fmt.Errorf("update the workload cluster's kubeadm-config ConfigMap: %w", err)
	}
	return nil
}
