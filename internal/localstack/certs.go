package localstack

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/capi-inplace/capi-inplace/internal/extension/extensiontest"
)

// servingCert is a self-made CA and a serving certificate it signed for 127.0.0.1
// and localhost, written as ca.crt, tls.crt and tls.key into Dir.
type servingCert struct {
	Dir   string
	CAPEM []byte
}

// newServingCert creates dir and writes a fresh CA (ca.crt) and a serving certificate
// it signed (tls.crt, tls.key) into it: the same certificates the extension's own
// tests use, plus the CA as a file for the manager flags that want one.
func newServingCert(dir string) (servingCert, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return servingCert{}, fmt.Errorf("create cert dir: %w", err)
	}
	caPEM, err := extensiontest.WriteSelfSignedCert(dir)
	if err != nil {
		return servingCert{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o600); err != nil {
		return servingCert{}, fmt.Errorf("write ca.crt: %w", err)
	}
	return servingCert{Dir: dir, CAPEM: caPEM}, nil
}
