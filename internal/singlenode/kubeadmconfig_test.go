package singlenode

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// initialClusterConfiguration is what kubeadm init stores in kube-system/kubeadm-config
// (kubeadm v1beta4, as for Kubernetes 1.31+).
const initialClusterConfiguration = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.35.0
controlPlaneEndpoint: 10.0.0.1:6443
apiServer:
  extraArgs:
  - name: audit-log-maxage
    value: "7"
networking:
  serviceSubnet: 10.96.0.0/12
`

// createKubeadmConfigMap writes the kubeadm-config ConfigMap of the test's workload
// cluster (the test API server itself, see sameClusterWorkloads).
func createKubeadmConfigMap(ctx context.Context, c client.Client) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "kubeadm-config"},
		Data:       map[string]string{"ClusterConfiguration": initialClusterConfiguration},
	}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
