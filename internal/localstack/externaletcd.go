package localstack

import (
	"context"
	"crypto/x509"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/certs"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// External etcd of a plain cluster (ClusterSpec.ExternalEtcd). KubeadmControlPlane
// refuses an even replica count with stacked etcd, so a two-replica control plane
// exists only with external etcd. KCP and CABPK then expect the user to provide the
// etcd CA (<cluster>-etcd, certificate only is enough for them) and the API server's
// etcd client certificate (<cluster>-apiserver-etcd-client); the in-memory provider
// also wants the CA's key (it serves its simulated etcd members with it). Nothing
// serves the endpoint: KCP's health checks skip etcd when it is external
// (ControlPlane.IsEtcdManaged) and the in-memory workload API server has its own store.
const (
	externalEtcdCAFile   = "/etc/kubernetes/pki/etcd/ca.crt"
	externalEtcdCertFile = "/etc/kubernetes/pki/apiserver-etcd-client.crt"
	externalEtcdKeyFile  = "/etc/kubernetes/pki/apiserver-etcd-client.key"
)

// externalEtcdEndpoint is the endpoint written into the ClusterConfiguration.
func externalEtcdEndpoint(cluster string) string {
	return "https://etcd." + cluster + ".invalid:2379"
}

// externalEtcdSpec is the ClusterConfiguration's etcd section of a cluster with
// external etcd (YAML, at the indentation of clusterConfiguration's fields).
func externalEtcdSpec(cluster string) string {
	return fmt.Sprintf("etcd:\n  external:\n    endpoints: [%s]\n    caFile: %s\n    certFile: %s\n    keyFile: %s\n",
		externalEtcdEndpoint(cluster), externalEtcdCAFile, externalEtcdCertFile, externalEtcdKeyFile)
}

// createExternalEtcdSecrets creates the etcd CA and the API server's etcd client
// certificate of a cluster, as an operator of an external etcd provides them.
func (s *Stack) createExternalEtcdSecrets(ctx context.Context, namespace, cluster string) error {
	key := client.ObjectKey{Namespace: namespace, Name: cluster}
	ca := &secret.Certificate{Purpose: secret.EtcdCA}
	if err := ca.Generate(); err != nil {
		return fmt.Errorf("generate etcd CA of cluster %s: %w", key, err)
	}
	caCert, err := certs.DecodeCertPEM(ca.KeyPair.Cert)
	if err != nil {
		return fmt.Errorf("decode etcd CA of cluster %s: %w", key, err)
	}
	caKey, err := certs.DecodePrivateKeyPEM(ca.KeyPair.Key)
	if err != nil {
		return fmt.Errorf("decode etcd CA key of cluster %s: %w", key, err)
	}
	clientKey, err := certs.NewPrivateKey()
	if err != nil {
		return fmt.Errorf("generate etcd client key of cluster %s: %w", key, err)
	}
	cfg := certs.Config{CommonName: "kube-apiserver-etcd-client", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	clientCert, err := cfg.NewSignedCert(clientKey, caCert, caKey)
	if err != nil {
		return fmt.Errorf("sign etcd client certificate of cluster %s: %w", key, err)
	}
	clientPair := &secret.Certificate{Purpose: secret.APIServerEtcdClient,
		KeyPair: &certs.KeyPair{Cert: certs.EncodeCertPEM(clientCert), Key: certs.EncodePrivateKeyPEM(clientKey)}}
	for _, c := range []*secret.Certificate{ca, clientPair} {
		c.Generated = false // user supplied: no owner reference
		sec := c.AsSecret(key, metav1.OwnerReference{})
		if err := s.Client.Create(ctx, sec); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create Secret %s/%s: %w", namespace, sec.Name, err)
		}
	}
	return nil
}
