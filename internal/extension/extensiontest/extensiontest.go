// Package extensiontest helps tests talk to the hook server the way CAPI does: a
// self-signed serving certificate written to a cert dir, an HTTPS client that
// trusts only that CA, and a call helper that posts a hook request to the
// handler's path.
//
// Imports: standard library, cluster-api hook and catalog types. For tests and the
// local stack (internal/localstack, which the demo runs); never on the extension's
// serving path.
package extensiontest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
)

// WriteSelfSignedCert writes a CA-signed serving certificate for 127.0.0.1 and
// localhost into dir as tls.crt and tls.key, and returns the CA certificate (PEM),
// which is what an ExtensionConfig's caBundle holds.
func WriteSelfSignedCert(dir string) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "capi-inplace test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "capi-inplace-extension"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal serving key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("write tls.crt: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("write tls.key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// Client returns an HTTPS client that trusts only caPEM.
func Client(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA PEM")
	}
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}

// Path returns the URL path of a handler; an empty name gives the hook's path
// without a handler (discovery).
func Path(hook runtimecatalog.Hook, name string) (string, error) {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return "", err
	}
	gvh, err := catalog.GroupVersionHook(hook)
	if err != nil {
		return "", err
	}
	return runtimecatalog.GVHToPath(gvh, name), nil
}

// Post sends body to baseURL+path and decodes the JSON answer into resp. It
// returns the HTTP status code.
func Post(ctx context.Context, c *http.Client, url string, body []byte, resp any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	r, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = r.Body.Close() }()
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return r.StatusCode, err
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return r.StatusCode, fmt.Errorf("decode response %q: %w", string(data), err)
	}
	return r.StatusCode, nil
}

// Call marshals a typed hook request, setting its apiVersion and kind as CAPI's
// runtime client does, and posts it to the handler.
func Call(ctx context.Context, c *http.Client, baseURL string, hook runtimecatalog.Hook, name string, req runtime.Object, resp any) (int, error) {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return 0, err
	}
	gvh, err := catalog.GroupVersionHook(hook)
	if err != nil {
		return 0, err
	}
	gvk, err := catalog.Request(gvh)
	if err != nil {
		return 0, err
	}
	req.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	return Post(ctx, c, baseURL+runtimecatalog.GVHToPath(gvh, name), body, resp)
}
