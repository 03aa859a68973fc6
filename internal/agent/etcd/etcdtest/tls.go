package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA with a server certificate for 127.0.0.1 and a client certificate,
// laid out like kubeadm's etcd PKI (ca.crt, server.{crt,key},
// healthcheck-client.{crt,key}) in Dir.
type PKI struct {
	Dir                   string
	CA                    string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewPKI writes a fresh PKI into dir.
func NewPKI(t testing.TB, dir string) PKI {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := PKI{Dir: dir, CA: filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "healthcheck-client.crt"), ClientKey: filepath.Join(dir, "healthcheck-client.key")}
	caKey := key(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	writePEM(t, p.CA, "CERTIFICATE", caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) {
		k := key(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, certPath, "CERTIFICATE", der)
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, keyPath, "EC PRIVATE KEY", kd)
	}
	issue(2, "etcd-server", x509.ExtKeyUsageServerAuth, p.ServerCert, p.ServerKey)
	issue(3, "kube-etcd-healthcheck-client", x509.ExtKeyUsageClientAuth, p.ClientCert, p.ClientKey)
	return p
}

// ServeTLS makes the member serve clients over HTTPS with client certificate
// authentication against the PKI's CA.
func (m *Member) ServeTLS(p PKI) {
	m.ClientURL = "https://" + m.ClientURL[len("http://"):]
	m.Extra = append(m.Extra, "--cert-file="+p.ServerCert, "--key-file="+p.ServerKey,
		"--trusted-ca-file="+p.CA, "--client-cert-auth=true")
}

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
